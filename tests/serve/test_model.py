"""The served model: its math against a plain implementation, its KV cache, its dispatch points."""

import pytest
import torch

from autotune.config import compose
from autotune.errors import UserError
from autotune.serve import build_model, check_prompts, dispatch, greedy_generate
from autotune.serve.attention import Segment

# The model and the plain reference sum in different orders (explicit QK^T/softmax vs SDPA, merged vs
# split projections): on the tiny preset their fp32 logits differ by at most 2e-6 (std of logits 1.0).
FP32_MODEL = dict(rtol=1e-5, atol=1e-5)


def prompt(n, seed=0, vocab=512):
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_logits_match_plain_reference(tiny, reference):
    tokens = prompt(37)
    cache = tiny.new_cache(max_slots=2, max_len=64)
    logits = tiny([Segment(1, 0, tuple(tokens))], cache, all_logits=True)
    torch.testing.assert_close(logits, reference(tiny, tokens), **FP32_MODEL)


def test_cached_decoding_matches_recomputing(tiny, reference):
    """Two sequences in one cache: chunked prefill, then decodes of different lengths batched together."""
    a, b = prompt(9, seed=1), prompt(4, seed=2)
    cache = tiny.new_cache(max_slots=3, max_len=32)
    tiny([Segment(2, 0, tuple(a[:5]))], cache)
    out = tiny([Segment(2, 5, tuple(a[5:])), Segment(0, 0, tuple(b))], cache)  # a's second chunk with b's prompt
    for step in range(6):
        torch.testing.assert_close(out[0], reference(tiny, a)[-1], **FP32_MODEL)
        torch.testing.assert_close(out[1], reference(tiny, b)[-1], **FP32_MODEL)
        a.append(int(out[0].argmax()))
        b.append(int(out[1].argmax()) if step % 2 else step)  # b also takes forced tokens
        out = tiny([Segment(2, len(a) - 1, (a[-1],)), Segment(0, len(b) - 1, (b[-1],))], cache)


def test_every_dispatch_point_is_called_with_the_step_shapes(tiny):
    c = tiny.config
    calls = []

    def recording(name):
        ref = dispatch.current(name)
        return lambda *args: calls.append((name, [tuple(a.shape) for a in args if torch.is_tensor(a)])) or ref(*args)

    cache = tiny.new_cache(max_slots=2, max_len=32)
    tiny([Segment(0, 0, (1, 2, 3))], cache)
    with dispatch.using({name: recording(name) for name in dispatch.NAMES}):
        tiny([Segment(0, 3, (4,)), Segment(1, 0, (5, 6, 7, 8, 9))], cache)  # a decode + a 5-token prefill: T = 6
    t, h, i = 6, c.hidden_size, c.intermediate_size
    qkv = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim
    expected = [("rms_norm", [(t, h), (h,)])]
    for layer in range(c.num_layers):
        if layer:
            expected.append(("fused_add_rms_norm", [(t, h), (t, h), (h,)]))
        expected += [("linear", [(t, h), (qkv, h)]),
                     # q and k together, with the positions and the cos/sin cache of every position
                     ("rotary_embedding", [(t,), (t, c.num_heads, c.head_dim), (t, c.num_kv_heads, c.head_dim),
                                           (c.max_seq_len, c.head_dim)]),
                     # one call for the step, vLLM's unified attention: 2 slots of 32 positions in blocks of 16; the
                     # decode's sequence (context 4) and the prefill's (5) hold one block each
                     ("paged_attention", [(t, c.num_heads, c.head_dim), (4, 16, c.num_kv_heads, c.head_dim),
                                          (4, 16, c.num_kv_heads, c.head_dim), (3,), (2,), (2, 1)]),
                     ("linear", [(t, c.num_heads * c.head_dim), (h, c.num_heads * c.head_dim)]),
                     ("fused_add_rms_norm", [(t, h), (t, h), (h,)]),
                     ("linear", [(t, h), (2 * i, h)]),
                     ("silu_and_mul", [(t, 2 * i)]),
                     ("linear", [(t, i), (h, i)])]
    expected += [("fused_add_rms_norm", [(t, h), (t, h), (h,)]), ("linear", [(2, h), (c.vocab_size, h)])]
    assert calls == expected


def test_a_replaced_dispatch_point_changes_the_output(tiny):
    cache = tiny.new_cache(max_slots=1, max_len=8)
    before = tiny([Segment(0, 0, (1, 2, 3))], cache)
    silu_and_mul = dispatch.current("silu_and_mul")
    with dispatch.using({"silu_and_mul": lambda x: silu_and_mul(x) * 0.5}):
        after = tiny([Segment(0, 0, (1, 2, 3))], cache)
    assert not torch.allclose(before, after)


def test_greedy_outputs_are_varied_and_reproducible(tiny):
    prompts = check_prompts(tiny.config.vocab_size, n=4, length=16, seed=0)
    assert prompts == check_prompts(tiny.config.vocab_size, n=4, length=16, seed=0)
    assert prompts != check_prompts(tiny.config.vocab_size, n=4, length=16, seed=1)
    tokens, logits = greedy_generate(tiny, prompts, max_new_tokens=12)
    assert tokens.shape == (4, 12) and tokens.dtype == torch.long
    assert logits.shape == (4, 12, tiny.config.vocab_size) and logits.dtype == torch.float32
    assert torch.equal(logits.argmax(-1), tokens)
    assert all(len(set(row)) >= 3 for row in tokens.tolist())  # no prompt decodes to one repeated token
    assert len(set(tokens.flatten().tolist())) >= 24  # 37 of 48 measured
    assert 0.5 < logits.std() < 5.0
    again, _ = greedy_generate(build_model(compose([]).model, "cpu"), prompts, max_new_tokens=12)
    assert torch.equal(tokens, again)


def test_greedy_generate_steps_as_an_engine_does(tiny):
    """The model check's generation, on the engine's schedule: prompts arrive one a step and are prefilled in chunks
    over their cached prefix, beside the decodes of those before them; the tokens are those of generating each
    prompt alone."""
    from tests.serve.test_engine import Recording

    model = Recording(tiny)
    prompts = check_prompts(tiny.config.vocab_size, n=3, length=20, seed=5)
    tokens, _ = greedy_generate(model, prompts, 4)  # type: ignore[arg-type]
    steps = model.steps
    assert any(len(s.tokens) > 1 and s.start > 0 for step in steps for s in step)  # a chunk over a cached prefix
    assert any({len(s.tokens) == 1 for s in step} == {True, False} for step in steps)  # decodes beside a chunk
    for i, p in enumerate(prompts):
        assert tokens[i].tolist() == greedy_generate(tiny, [p], 4)[0][0].tolist()


def test_greedy_generate_matches_the_reference(tiny, reference):
    prompts = check_prompts(tiny.config.vocab_size, n=2, length=5, seed=3)
    tokens, logits = greedy_generate(tiny, prompts, max_new_tokens=3)
    for i, p in enumerate(prompts):
        full = p + tokens[i, :2].tolist()
        torch.testing.assert_close(logits[i], reference(tiny, full)[-3:], **FP32_MODEL)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_tracks_fp32(dtype, tiny):
    half = build_model(compose([f"model.dtype={dtype}"]).model, "cpu")
    assert half.embed.dtype == getattr(torch, dtype)
    prompts = check_prompts(tiny.config.vocab_size, n=2, length=8, seed=0)
    _, ref = greedy_generate(tiny, prompts, 1)
    _, got = greedy_generate(half, prompts, 1)
    assert torch.isfinite(got).all()
    assert torch.corrcoef(torch.stack([ref.flatten(), got.flatten()]))[0, 1] > 0.99


@pytest.mark.parametrize("override, message", [
    (["model.num_kv_heads=3"], "not a multiple of model.num_kv_heads"),
    (["model.head_dim=31"], "is odd"),
    (["model.dtype=int8"], "model.dtype"),
    (["model.dtype=float64"], "not supported"),
    (["model.num_layers=0"], "model.num_layers is 0"),
])
def test_bad_model_configs_are_user_errors(override, message):
    with pytest.raises(UserError, match=message):
        build_model(compose(override).model, "cpu")


def test_bad_steps_are_refused_before_they_reach_the_device(tiny):
    cache = tiny.new_cache(max_slots=1, max_len=8)
    for segments in ([Segment(1, 0, (1,))], [Segment(0, 6, (1, 2, 3))], [Segment(0, 0, (512,))], [],
                     [Segment(0, 0, (1,)), Segment(0, 1, (2,))]):
        with pytest.raises(ValueError):
            tiny(segments, cache)


def test_the_cache_is_vllms_paged_layout_and_attention_must_follow_the_block_table(tiny):
    """k/v [num_blocks, block_size, kv_heads, D] per layer; a sequence's blocks come from a shuffled pool, so an
    attention that walks blocks in order from the first (ignoring block_table) changes the logits; a slot that
    starts a new sequence gives its blocks back first."""
    c, tokens = tiny.config, tuple(prompt(40, seed=4))
    reference = dispatch.current("paged_attention")
    tables = []

    def recording(*args):
        tables.append(args[5].clone())
        return reference(*args)

    def in_order(q, k, v, cu, lens, table, *rest):  # block j of a sequence taken as its first block + j
        steps = torch.arange(table.shape[1], dtype=table.dtype)
        return reference(q, k, v, cu, lens, (table[:, :1] + steps).remainder(k.shape[0]), *rest)

    cache = tiny.new_cache(max_slots=2, max_len=64)
    assert cache.k.shape == (c.num_layers, 8, 16, c.num_kv_heads, c.head_dim)
    with dispatch.using({"paged_attention": recording}):
        logits = tiny([Segment(1, 0, tokens)], cache)
    blocks = tables[0][0].tolist()
    assert len(blocks) == 3 and blocks != list(range(blocks[0], blocks[0] + 3)) and len(cache.free) == 5
    with dispatch.using({"paged_attention": in_order}):
        wrong = tiny([Segment(1, 0, tokens)], tiny.new_cache(max_slots=2, max_len=64))
    assert not torch.allclose(logits, wrong, atol=1e-3)
    again = tiny([Segment(1, 0, tokens)], cache)  # the slot's new sequence: its old blocks back to the pool first
    assert len(cache.free) == 5 and torch.equal(again, logits)


@pytest.mark.parametrize("block_size", [32, 48, 128])  # 48: not a power of two
def test_the_logits_do_not_depend_on_the_block_size(tiny, block_size):
    prompts = check_prompts(tiny.config.vocab_size, n=3, length=11, seed=2)
    tokens, logits = greedy_generate(tiny, prompts, 6)
    other_tokens, other_logits = greedy_generate(tiny, prompts, 6, block_size=block_size)
    assert torch.equal(tokens, other_tokens)
    torch.testing.assert_close(other_logits, logits, rtol=0, atol=1e-5)
