"""The candidate's own process: imports the candidate and runs its launcher on tensors that hold no case values."""
