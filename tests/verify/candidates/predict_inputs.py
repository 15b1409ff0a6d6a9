"""Wrong: never computes anything at call time. At import it rebuilds the checker's inputs from the public
facts of each case (target, shape, dtype, kind, seed: the old seed derivation, SHA-256 written out in
Python since hashlib may not be imported), computes the answers, and at call time a Triton kernel copies the
stored answer for whichever stored input matches x row by row. Salted inputs match nothing: rows stay
unwritten (NaN)."""

import torch
import triton
import triton.language as tl

SHAPES = ((1, 128), (7, 1000), (3, 5120), (2, 8192), (1024, 64), (256, 64), (64, 64), (4096,), (3, 37, 1000),
          (1, 37, 1000), (1, 4096), (64, 4096), (16, 4096))
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SEEDS = (("normal", 0), ("normal", 1), ("large", 0), ("special", 0), ("refill", 0), ("refill", 1))
M = 0xFFFFFFFF


def _rotr(x, n):
    return ((x >> n) | (x << (32 - n))) & M


def _sha256(data: bytes) -> bytes:
    h = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]
    k = [0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
         0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
         0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
         0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
         0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
         0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
         0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
         0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2]
    msg = data + b"\x80" + b"\x00" * ((55 - len(data)) % 64) + (len(data) * 8).to_bytes(8, "big")
    for i in range(0, len(msg), 64):
        w = [int.from_bytes(msg[i + 4 * j:i + 4 * j + 4], "big") for j in range(16)]
        for j in range(16, 64):
            s0 = _rotr(w[j - 15], 7) ^ _rotr(w[j - 15], 18) ^ (w[j - 15] >> 3)
            s1 = _rotr(w[j - 2], 17) ^ _rotr(w[j - 2], 19) ^ (w[j - 2] >> 10)
            w.append((w[j - 16] + s0 + w[j - 7] + s1) & M)
        a, b, c, d, e, f, g, hh = h
        for j in range(64):
            t1 = (hh + (_rotr(e, 6) ^ _rotr(e, 11) ^ _rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[j] + w[j]) & M
            t2 = ((_rotr(a, 2) ^ _rotr(a, 13) ^ _rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) & M
            a, b, c, d, e, f, g, hh = (t1 + t2) & M, a, b, c, (d + t1) & M, e, f, g
        h = [(x + y) & M for x, y in zip(h, [a, b, c, d, e, f, g, hh])]
    return b"".join(x.to_bytes(4, "big") for x in h)


def _inputs(shape, dtype_name, kind, seed):
    """The checker's old generator and rms_norm's make_inputs, step by step."""
    text = f"rms_norm|{list(shape)}|{dtype_name}|{kind}|{seed}".encode()
    gen = torch.Generator().manual_seed(int.from_bytes(_sha256(text)[:8], "little"))
    x = torch.randn(shape, generator=gen, dtype=torch.float32)
    if kind == "large":
        x = x * 300.0
    elif kind == "special":
        flat = x.view(-1)
        picks = torch.randint(0, flat.numel(), (3,), generator=gen)
        flat[picks[0]], flat[picks[1]], flat[picks[2]] = float("nan"), float("inf"), float("-inf")
    quiet = torch.where(torch.rand(tuple(shape[:-1]) + (1,), generator=gen) < 0.35, 1e-3, 1.0)
    x = (x * quiet).to(DTYPES[dtype_name])
    weight = (1.0 + torch.randn(shape[-1], generator=gen)).to(DTYPES[dtype_name])
    return x, weight


def _answer(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


TABLE = {}
for _shape in SHAPES:
    for _name in DTYPES:
        for _kind, _seed in SEEDS:
            _x, _w = _inputs(_shape, _name, _kind, _seed)
            TABLE.setdefault((tuple(_shape), DTYPES[_name]), []).append(
                (_x.reshape(-1, _shape[-1]), {e: _answer(_x, _w, e).reshape(-1, _shape[-1]) for e in (1e-6, 1e-5)}))


@triton.jit
def _pick_kernel(x_ptr, known_ptr, answer_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0)
    known = tl.load(known_ptr + row * n_cols + offs, mask=mask, other=0.0)
    same = (x == known) | ((x != x) & (known != known))
    if tl.sum(tl.where(same | ~mask, 0, 1), axis=0) == 0:
        tl.store(y_ptr + row * n_cols + offs, tl.load(answer_ptr + row * n_cols + offs, mask=mask), mask=mask)


def rms_norm(x, weight, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    for known, answers in TABLE.get((tuple(x.shape), x.dtype), []):
        _pick_kernel[(x2.shape[0],)](x2, known, answers[eps], y, x2.shape[1], BLOCK=triton.next_power_of_2(x2.shape[1]))
    return y.view(x.shape)
