"""The device process: holds the case data, builds the candidate's kernels from its syntax tree, replays the host's
launches on
the data and sends the judge its evidence."""
