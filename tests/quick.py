"""The checker at its quickest, for the tests of what surrounds it (the agents, the run, sweeps, publishing): the
quick plan (conf/verify/quick.yaml: one seed, rows cut for the interpreter, every range case sampled) in float32
only, at the tiny model's sizes. The checker's own tests (tests/verify/) choose their plans themselves; the files
judged here are real."""

PIPELINE_CHECK = ["verify=quick", "verify.dtypes=[float32]", "verify.models=[tiny]"]
