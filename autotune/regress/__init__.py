"""`autotune regress`: re-judge every merged kernel on this environment against its recorded verdict
(`command.py`, the command's entry)."""
