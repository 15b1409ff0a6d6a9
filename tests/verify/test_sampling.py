"""The sampled call's byte states (autotune/verify/interp/sampling.py): what is compared, what is good to read."""

import json
import textwrap

import numpy as np
import torch

from autotune.verify.interp.sampling import INPUT, INVALID, WRITTEN, Sample
from tests.verify.interpreted import last_line


def tracked(sample: Sample, *tensors: torch.Tensor) -> None:
    for t in tensors:
        sample.track(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())


def test_a_copy_carries_each_elements_state_across_dtypes_and_a_zero_fill_is_no_answer():
    sample = Sample(2, np.random.default_rng(0))
    acc, out = torch.empty(8, dtype=torch.float32), torch.empty(8, dtype=torch.bfloat16)
    tracked(sample, acc, out)
    sample._bytes(acc)[:4] = WRITTEN
    sample._bytes(acc)[4, 0] = WRITTEN  # one byte of four: not an answer
    sample.carry(out, acc)
    assert sample.written(out).tolist() == [True] * 4 + [False] * 4
    sample.carry(out, None)  # a zero fill
    assert not sample.written(out).any() and bool((sample._bytes(out) == INPUT).all())


def test_after_a_sampled_launch_a_zero_fill_it_was_given_is_no_longer_good_to_read():
    sample = Sample(2, np.random.default_rng(0))
    out, kept = torch.empty(16, dtype=torch.float32), torch.empty(16, dtype=torch.float32)
    tracked(sample, out, kept)
    sample.carry(out, None)
    sample.carry(kept, None)
    assert sample.order((64, 1, 1)) is not None  # 2 of 64 programs: the launch is sampled
    sample._bytes(out)[:2] = WRITTEN  # what its sampled programs wrote
    sample.after_launch([out])
    states = sample._bytes(out)[:, 0].tolist()
    assert states == [WRITTEN] * 2 + [INVALID] * 14  # the rest: a skipped program might have written there
    assert bool((sample._bytes(kept) == INPUT).all())  # a storage the launch was not given keeps its fill
    assert sample.order((2, 1, 1)) is None  # a grid no longer than the sample runs whole ...
    sample.carry(out, None)
    sample.after_launch([out])
    assert bool((sample._bytes(out) == INPUT).all())  # ... and changes nothing


def test_a_sample_keeps_the_grids_last_program_and_draws_the_others_afresh_per_call():
    # the last program is where a grid's tail lives (a ragged tile, a stream-K remainder); the last alone would be
    # a sample a kernel could predict, so `programs` others are drawn besides, different from call to call
    rng = np.random.default_rng(0)
    drawn = []
    for _ in range(20):
        ids = Sample(1, rng).order((100, 1, 1))
        assert ids is not None and 99 in ids.tolist()
        drawn += [int(i) for i in ids if i != 99]
    assert len(set(drawn)) > 10
    assert Sample(1, rng).order((2, 1, 1)) is None  # a grid no longer than the sample and its last runs whole
    assert Sample(2, rng).order((4, 1, 1)) is not None  # 3 of 4 sampled, where nothing would run the call again
    # where the call would run again whole (a call of several launches), an axis its sample holds half of runs whole
    assert Sample(2, rng, whole_if_half=True).order((6, 2, 1)) is None
    assert len(Sample(2, rng, whole_if_half=True).order((7, 2, 1))) == 3 * 2


def test_a_second_launch_samples_the_axis_the_first_drew_whatever_its_longest():
    """An MoE's activation kernel runs one program per token and its down projection one per token and column block:
    the second launch samples the tokens the first ran (reading rows they wrote), not its longer column axis."""
    sample = Sample(2, np.random.default_rng(0))
    first = sample.order((40, 1, 1))
    assert first is not None
    tokens = sorted(first.tolist())
    second = sample.order((40, 100, 1))  # its longest axis is the columns'
    assert second is not None and sorted({int(i) // 100 for i in second}) == tokens
    assert len(second) == len(tokens) * 100  # every column block of each sampled token
    alone = Sample(2, np.random.default_rng(0)).order((40, 100, 1))  # without the first: along the columns
    assert alone is not None and len({int(i) // 100 for i in alone}) == 40


def test_a_sample_runs_an_edge_of_a_power_of_two_chunk_each_call():
    """A stop 48 attacker's paged attention searched cu_seqlens_q by chunks of 512 sequences and lost the last of
    each: one program in 1024. Each call's sample runs the last or the first of two power-of-two chunks (from 32)."""
    rng = np.random.default_rng(1)
    edges = {e for k in range(5, 10) for e in (2 ** k - 1, 2 ** k)}
    met = set()
    for _ in range(100):
        ids = set(Sample(1, rng).order((1024, 1, 1)).tolist())
        assert 1023 in ids and len(ids) <= 4 and len(ids & edges) >= 1
        met |= ids & edges
    assert met == edges


PACE_PROBE = textwrap.dedent('''
    import json, numpy as np, torch, triton, triton.language as tl
    from autotune.verify.interp import install
    from autotune.verify.interp.sampling import Sample, ended_by_sample

    install.install()

    @triton.jit
    def _double(x_ptr, y_ptr):
        i = tl.program_id(0)
        tl.store(y_ptr + i, tl.load(x_ptr + i) * 2.0)

    found = []
    for programs, finish_within_s in ((50, 0.0), (3, 0.0), (50, 60.0), (50, 1e-9)):
        x, y = torch.arange(1, programs + 1, dtype=torch.float32), torch.zeros(programs)
        with Sample(2, np.random.default_rng(0), finish_within_s=finish_within_s) as sample:
            try:
                _double[(programs,)](x, y)
            except Exception as e:
                assert ended_by_sample(e), e
        found.append([sample.skipped, sample.skipped_s, int((y != 0).sum())])
    print(json.dumps(found))
''')


def test_a_sample_counts_the_programs_it_left_out_and_their_time_at_its_pace():
    """What replay.repeat_sampled weighs to run a call again whole (`verify.whole_within_s`): the programs the
    launches left out and the interpreter's time for them at the pace of the sampled ones; and, a launch that would
    leave out little (Sample.finish), the rest of its grid run at once."""
    found = json.loads(last_line(PACE_PROBE))
    (skipped, seconds, ran), (whole_skipped, whole_seconds, whole_ran), finished, unfinished = found
    assert 45 <= skipped <= 47 and whole_skipped == 0  # 2 drawn, 31 and 32 and the last of 50 ran
    assert ran == 50 - skipped and whole_ran == 3  # all 3 of a grid of 3
    assert 0 < seconds < 60 and whole_seconds == 0
    # within Sample.finish's limit at the sample's pace, the launch ran the rest of its grid after its sample
    assert finished == [0, 0.0, 50], finished
    assert unfinished[0] == skipped and unfinished[2] == ran, unfinished  # past it: a sample, as without one


WIDEN_PROBE = textwrap.dedent('''
    import json, numpy as np, torch, triton, triton.language as tl
    from autotune.verify.interp import install
    from autotune.verify.interp.sampling import Sample, ended_by_sample

    install.install()

    @triton.jit
    def _double(x_ptr, y_ptr):
        i = tl.program_id(0)
        tl.store(y_ptr + i, tl.load(x_ptr + i) * 2.0)

    @triton.jit
    def _pairs(y_ptr, z_ptr, ran_ptr):  # another grid over the first's results: its drawn programs read unsampled rows
        i = tl.program_id(0)
        tl.store(z_ptr + i, tl.load(y_ptr + 2 * i) + tl.load(y_ptr + 2 * i + 1))
        tl.store(ran_ptr + i, 1)

    found = []
    for within in (0.0, 1e-9):
        x, y, z = torch.arange(1, 401, dtype=torch.float32), torch.empty(400), torch.zeros(200)
        ran = torch.zeros(200, dtype=torch.int32)
        with Sample(2, np.random.default_rng(0), within) as sample:
            sample.track(y.untyped_storage().data_ptr(), y.untyped_storage().nbytes())
            for kernel, args, grid in ((_double, (x, y), 400), (_pairs, (y, z, ran), 200)):
                try:
                    kernel[(grid,)](*args)
                except Exception as e:
                    assert ended_by_sample(e), e
                sample.after_launch(args)
        found.append([int(ran.sum()), sample.skipped, list(dict.fromkeys(sample.notes))])
    print(json.dumps(found))
''')


def test_a_launch_that_widened_to_read_partial_results_stops_after_verify_widen_within_s():
    """A second kernel on another grid reads the first's sampled rows: it widens to every program (those that read
    only valid rows make valid output), but a fused MoE's down GEMM over sorted tiles has 11,904 programs and
    none that reads a whole valid tile; with a limit it stops, its unrun programs left out as a sample's are."""
    (ran_all, skipped_all, notes_all), (ran_stopped, skipped_stopped, notes_stopped) = json.loads(
        last_line(WIDEN_PROBE))
    assert ran_all == 200  # every program of the widened launch ran
    assert "a launch that read partial results ran whole" in notes_all and not any("stopped" in n for n in notes_all)
    assert ran_stopped < 10 and skipped_stopped > skipped_all  # the widened launch ran a program or two, then stopped
    assert any("then stopped" in n for n in notes_stopped), notes_stopped
