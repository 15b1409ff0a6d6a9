"""The static scan of a candidate's source: the policy, its allow-list, and the rule that no state survives a call."""
