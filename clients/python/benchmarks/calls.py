"""The Python client's call latency and throughput against a running supervisor (docs/benchmarks.md):

    python3 clients/python/benchmarks/calls.py --socket <home>/supervisor.sock --target bench.callee --method ping

Prints p50/p99 of blocking calls one at a time, and asyncio calls/s with 64 in flight.
"""
import argparse
import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
from sandboxed_plugins import AsyncClient, Client  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--target", default="bench.callee")
    parser.add_argument("--method", default="ping")
    parser.add_argument("--calls", type=int, default=5000)
    args = parser.parse_args()
    client = Client(socket=args.socket)
    for _ in range(300):
        client.call(args.target, args.method)
    samples = []
    for _ in range(args.calls):
        t0 = time.perf_counter_ns()
        client.call(args.target, args.method)
        samples.append(time.perf_counter_ns() - t0)
    client.close()
    samples.sort()

    async def flight() -> float:
        async with await AsyncClient.connect(socket=args.socket) as aclient:
            count = args.calls * 2

            async def lane(n: int) -> None:
                for _ in range(n):
                    await aclient.call(args.target, args.method)

            t0 = time.perf_counter()
            await asyncio.gather(*(lane(count // 64) for _ in range(64)))
            return (count // 64) * 64 / (time.perf_counter() - t0)

    print(json.dumps({
        "python blocking call p50 (µs)": round(samples[len(samples) // 2] / 1000, 1),
        "python blocking call p99 (µs)": round(samples[int(len(samples) * 0.99)] / 1000, 1),
        "python asyncio calls/s, 64 in flight": round(asyncio.run(flight())),
    }))


if __name__ == "__main__":
    main()
