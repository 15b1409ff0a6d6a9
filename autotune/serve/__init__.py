"""(filled in by the stage's module)"""
