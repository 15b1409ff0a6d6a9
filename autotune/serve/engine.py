"""The serving engine: iteration-level batching of a stream of requests over the model's KV cache.

Every step (one model forward) first gives each running sequence that has finished its prompt one
decode token, then spends the rest of `max_batched_tokens` on prompt chunks: unfinished prompts first,
then newly arrived requests, admitted while fewer than `max_batch_size` sequences run. So new requests
join between decode steps, long prompts are prefilled in chunks, and a finished sequence frees its
cache slot (and its KV blocks) at once. Sampling is greedy, so batching never changes a request's tokens.

Time is real: requests arrive at `arrival_s / time_scale` seconds after the start; when nothing runs
and the next arrival is in the future, the engine sleeps until then. A closed-loop request (`after`
set) arrives `arrival_s / time_scale` after the request it follows has finished.

    report = Engine(model, max_batch_size=8, max_batched_tokens=2048).run(requests)
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import time
from collections.abc import Callable

from autotune.errors import UserError
from autotune.serve.attention import BLOCK_SIZE, Segment, check_block_size
from autotune.serve.report import RequestStats, ServeReport

__all__ = ["Engine", "Request", "ServeReport"]


@dataclasses.dataclass(frozen=True)
class Request:
    request_id: int
    prompt: tuple[int, ...]  # token ids
    output_len: int  # tokens to generate
    arrival_s: float = 0.0  # seconds from the start (or, with `after`, from that request's finish)
    after: int | None = None  # closed loop: the request whose finish this one waits for

    def __post_init__(self):
        object.__setattr__(self, "prompt", tuple(int(t) for t in self.prompt))
        if not self.prompt or self.output_len < 1 or self.arrival_s < 0:
            raise ValueError(f"request {self.request_id}: needs a non-empty prompt, output_len >= 1 and "
                             f"arrival_s >= 0 (got {len(self.prompt)} tokens, {self.output_len}, {self.arrival_s})")

    @property
    def total_len(self) -> int:
        return len(self.prompt) + self.output_len


@dataclasses.dataclass
class _Sequence:
    """A request holding a cache slot: `computed` tokens are in the cache, `output` sampled so far."""

    request: Request
    slot: int
    arrival_s: float
    computed: int = 0
    output: list[int] = dataclasses.field(default_factory=list)
    token_times_s: list[float] = dataclasses.field(default_factory=list)

    @property
    def prefilled(self) -> bool:
        return self.computed >= len(self.request.prompt)

    def stats(self) -> RequestStats:
        r = self.request
        return RequestStats(r.request_id, len(r.prompt), len(self.output), self.arrival_s, self.token_times_s[0],
                            self.token_times_s[-1], tuple(self.token_times_s), tuple(self.output))


class Engine:
    def __init__(self, model, *, max_batch_size: int = 8, max_batched_tokens: int = 2048, time_scale: float = 1.0,
                 block_size: int = BLOCK_SIZE, clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], None] = time.sleep):
        if max_batch_size < 1:
            raise UserError(f"serve.max_batch_size={max_batch_size} (set it to 1 or more)")
        if max_batched_tokens < max_batch_size:
            raise UserError(f"serve.max_batched_tokens={max_batched_tokens} is below serve.max_batch_size="
                            f"{max_batch_size} (each running sequence needs a token per step: raise it)")
        check_block_size(block_size)
        if not time_scale > 0:
            raise UserError(f"serve.time_scale={time_scale} (set it > 0; 2.0 plays traffic twice as fast)")
        self.model = model
        self.max_batch_size, self.max_batched_tokens, self.time_scale = max_batch_size, max_batched_tokens, time_scale
        self.block_size = block_size
        self.clock, self.sleep = clock, sleep

    def run(self, requests: list[Request]) -> ServeReport:
        """Serve every request to completion and report the latencies."""
        check_requests(requests, self.model.config.vocab_size, self.model.config.max_seq_len)
        cache = self.model.new_cache(self.max_batch_size, max(r.total_len for r in requests), self.block_size)
        state = Schedule(requests, self.max_batch_size, self.time_scale)
        start = self.clock()
        steps = 0
        while not state.done():
            now = self.clock() - start
            state.arrive(now)
            if not state.running and not state.waiting:
                self.sleep(max(0.0, state.next_arrival_s() - now))
                continue
            segments, samplers = state.plan(self.max_batched_tokens)
            tokens = self.model(segments, cache).argmax(dim=-1).tolist()  # .tolist() waits for the GPU
            state.commit(samplers, tokens, self.clock() - start)
            steps += 1
        return ServeReport.from_requests(state.finished, wall_s=self.clock() - start, steps=steps)


def check_requests(requests: list[Request], vocab_size: int, max_seq_len: int) -> None:
    if not requests:
        raise UserError("workload has no requests: set workload.num_requests > 0")
    seen = set()
    for r in requests:
        if r.request_id in seen:
            raise ValueError(f"request id {r.request_id} appears twice")
        if r.after is not None and r.after not in seen:
            raise ValueError(f"request {r.request_id} follows {r.after}, which is not an earlier request")
        if r.total_len > max_seq_len:
            raise ValueError(f"request {r.request_id}: {len(r.prompt)} prompt + {r.output_len} output tokens "
                             f"exceed model.max_seq_len={max_seq_len}")
        if min(r.prompt) < 0 or max(r.prompt) >= vocab_size:
            raise ValueError(f"request {r.request_id}: token ids outside the vocabulary [0, {vocab_size})")
        seen.add(r.request_id)


class Schedule:
    """Where every request is: not yet arrived, waiting for a slot, running, or finished; and each step's segments
    (`plan`). The engine steps it in real time; `model.greedy_generate` (the model check) one step per time unit."""

    def __init__(self, requests: list[Request], max_batch_size: int, time_scale: float):
        self.time_scale = time_scale
        self.future = [(r.arrival_s / time_scale, i, r) for i, r in enumerate(requests) if r.after is None]
        heapq.heapify(self.future)
        self.followers = collections.defaultdict(list)  # request id -> closed-loop requests waiting for it
        for r in requests:
            if r.after is not None:
                self.followers[r.after].append(r)
        self.order = {r.request_id: i for i, r in enumerate(requests)}
        self.waiting: collections.deque[tuple[float, Request]] = collections.deque()
        self.running: list[_Sequence] = []
        self.free_slots = list(range(max_batch_size - 1, -1, -1))
        self.finished: list[RequestStats] = []
        self.total = len(requests)

    def done(self) -> bool:
        return len(self.finished) == self.total

    def next_arrival_s(self) -> float:
        return self.future[0][0]

    def arrive(self, now_s: float) -> None:
        while self.future and self.future[0][0] <= now_s:
            arrival_s, _, request = heapq.heappop(self.future)
            self.waiting.append((arrival_s, request))

    def plan(self, budget: int) -> tuple[list[Segment], list[_Sequence | None]]:
        """This step's segments, and per segment the sequence that samples from its logits (None: mid-prompt)."""
        segments: list[Segment] = []
        samplers: list[_Sequence | None] = []
        for seq in self.running:
            if seq.prefilled:
                segments.append(Segment(seq.slot, seq.computed, (seq.output[-1],)))
                samplers.append(seq)
                seq.computed += 1
        budget -= len(segments)
        while self.waiting and self.free_slots and budget > 0:
            arrival_s, request = self.waiting.popleft()
            self.running.append(_Sequence(request, self.free_slots.pop(), arrival_s))
        for seq in self.running:
            if budget == 0:
                break
            if not seq.prefilled:
                prompt = seq.request.prompt
                n = min(budget, len(prompt) - seq.computed)
                segments.append(Segment(seq.slot, seq.computed, prompt[seq.computed:seq.computed + n]))
                seq.computed += n
                samplers.append(seq if seq.prefilled else None)
                budget -= n
        return segments, samplers

    def commit(self, samplers: list[_Sequence | None], tokens: list[int], now_s: float) -> None:
        for seq, token in zip(samplers, tokens):
            if seq is None:
                continue
            seq.output.append(token)
            seq.token_times_s.append(now_s)
            if len(seq.output) == seq.request.output_len:
                self.finish(seq, now_s)

    def finish(self, seq: _Sequence, now_s: float) -> None:
        self.running.remove(seq)
        self.free_slots.append(seq.slot)
        self.finished.append(seq.stats())
        for follower in self.followers.pop(seq.request.request_id, []):
            arrival_s = now_s + follower.arrival_s / self.time_scale
            heapq.heappush(self.future, (arrival_s, self.order[follower.request_id], follower))
