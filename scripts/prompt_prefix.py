"""How much of a new run's first-turn prompt a prefix cache can serve: two runs' profiles, the same targets, the
first-turn messages (system + task) each run sends, tokenized with a local model's tokenizer.

    python scripts/prompt_prefix.py TOKENIZER_JSON [--block 128] [key=value ...]

Takes two profiles of the configured model (their measured figures differ run to run), renders candidate 1's
first-turn prompt per hot target from each, and prints per target: the prompt's tokens, the tokens the two runs'
prompts share from the start, where the profile's figures begin ("## Where it matters"), and what a server with
that block size would serve from its cache (whole blocks of the shared prefix). A benchmark that prints figures,
not a test.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path


def first_turn(target, hotspot, cfg) -> str:
    from autotune.agent import prompts

    system = prompts.system_message(cfg=cfg)
    task = prompts.task_message(target, hotspot, prompts.roofline(cfg), index=0, candidates=2)
    return f"system: {system}\nuser: {task}\n"


def shared_tokens(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tokenizer", help="a tokenizer.json (Hugging Face tokenizers format)")
    parser.add_argument("--block", type=int, default=128, help="the server's KV-cache block size in tokens")
    args, overrides = parser.parse_known_args()
    from tokenizers import Tokenizer

    from autotune import targets
    from autotune.config import compose
    from autotune.profile import hotspot_for, hotspots_in, profile_serving

    tok = Tokenizer.from_file(args.tokenizer)
    runs = []
    for i in range(2):
        with tempfile.TemporaryDirectory() as out:
            cfg = compose([f"profile.out_dir={out}", *overrides])
            runs.append((cfg, profile_serving(cfg).hotspots))
    names = [h.target for h in hotspots_in(runs[0][1]) if h.target in targets.NAMES]
    print(f"{'target':<26} {'tokens':>7} {'shared':>7} {'figures at':>10} {'cached @%d' % args.block:>10}  "
          "first differing text")
    for name in names:
        target = targets.get(name)
        texts = [first_turn(target, hotspot_for(name, h), cfg) for cfg, h in runs]
        ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
        shared = shared_tokens(*ids)
        figures = len(tok.encode(texts[0][:texts[0].index("## Where it matters")], add_special_tokens=False).ids)
        cached = shared // args.block * args.block
        differ = tok.decode(ids[0][shared:shared + 12]).replace("\n", " ")
        print(f"{name:<26} {len(ids[0]):>7} {shared:>7} {figures:>10} {cached:>10}  {differ!r}")


if __name__ == "__main__":
    main()
