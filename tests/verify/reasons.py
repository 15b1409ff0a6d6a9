"""Classes of a verdict's reason, for the tests of cheats: a cheat is caught by whichever of its failing cases comes
first, and which one that is depends on the run's drawn sizes and turns, so a test names the class of reason any
failing case gives, never one case's text (a kernel caught by another case first still fails for the same cause)."""

# A wrong answer, in any of the forms autotune/verify/judge/compare.py words it.
WRONG_VALUES = ("values differ beyond rtol", "NaN at ", "(NaN swallowed)", "overflow: +-Inf at",
                "where the reference is +-Inf differ", "fp64-golden fallback failed", "no finite fp64 golden",
                "integers differ by more than one", "integers off by one, more than",
                "less accurate than the reference", "systematic bias: ", "systematic bias in ",
                "most of its values beyond their own tolerance")


def says(reason: str, fragment: str | tuple[str, ...]) -> bool:
    """Whether the reason has the fragment, or one of a class's fragments."""
    return any(f in reason for f in (fragment if isinstance(fragment, tuple) else (fragment,)))
