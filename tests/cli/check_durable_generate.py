#!/usr/bin/env python3
"""check_durable_generate.py --deepinfer BIN --model M [--launch "mpirun --oversubscribe -np 4" --deploy D]
                             [--requests N]

generate's durable output, killed and resumed as a batch job is: N requests of mixed lengths (greedy, sampled with
and without a seed: a request without one draws with its ordinal, which a resumed run must keep) run

 1. whole, in input order (--ordered-output): the reference;
 2. durable, uninterrupted: each id once, every result equal to the reference's;
 3. killed with SIGKILL (the whole process group: launcher and every rank) at three points — once a tenth of the
    results are in, at a random moment after that, and once half are in — then a kill inside a write (DEEPINFER_FAULT_TORN_WRITE:
    the file ends in a torn line), each followed by --resume, until a run ends 0: the union equals the reference,
    each id once, and no kill lost more results than the requests in flight could hold;
 4. stopped by SIGUSR1 (as Slurm's --signal sends it): the job drains, exits 75 with its status file "stopped",
    and --resume finishes it, equal to the reference;
 5. order-results puts the durable output in input order: byte for byte the reference.
"""
import argparse
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time

KEEP = {"id", "output_token_ids", "finish_reason", "prompt_tokens", "output_tokens"}


def write_requests(path, n, vocab, seed=7):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            r = {"id": f"r{i}", "prompt_token_ids": [rng.randrange(3, vocab) for _ in range(rng.randrange(2, 40))],
                 "max_new_tokens": rng.randrange(1, 24)}
            if i % 3 == 1:
                r["temperature"] = 0.9
            if i % 6 == 1:
                r["seed"] = 1000 + i
            f.write(json.dumps(r) + "\n")
            if i % 50 == 0:
                f.write("\n")  # blank lines do not count as requests


def by_id(path):
    lines = [json.loads(line) for line in open(path)]
    table = {r["id"]: {k: v for k, v in r.items() if k in KEEP} for r in lines}
    if len(table) != len(lines):
        seen = set()
        twice = [r["id"] for r in lines if r["id"] in seen or seen.add(r["id"])]
        raise AssertionError(f"{path}: ids appear twice: {twice[:10]}; lines {len(lines)}")
    return table


def count_lines(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def start(cmd, log, env=None):
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=dict(os.environ, **(env or {})))


def session_processes(sid):
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, session, ...
            if fields[0] != "Z" and int(fields[3]) == sid:
                pids.append(int(entry))
    return pids


def signal_session(sid, sig):
    pids = session_processes(sid)
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return pids


def kill_group(proc):
    """SIGKILL to the launcher and every rank: the whole session (a launcher may put its ranks in process groups of
    their own), as a node that goes down or a scheduler's kill does. SIGSTOP first, so that no rank writes on while
    the others are being found: the output is what it was when the kill was decided."""
    signal_session(proc.pid, signal.SIGSTOP)
    for _ in range(50):
        if not signal_session(proc.pid, signal.SIGKILL):
            break
        time.sleep(0.05)
    proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deepinfer", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--launch", default="", help="launcher and its options (e.g. mpirun --oversubscribe -np 4)")
    ap.add_argument("--deploy", default="")
    ap.add_argument("--requests", type=int, default=300)
    args = ap.parse_args()
    config = json.load(open(os.path.join(args.model, "config.json") if os.path.isdir(args.model) else args.model))
    vocab = min(config.get("text_config", config)["vocab_size"], 300)
    rng = random.Random()
    with tempfile.TemporaryDirectory() as tmp:
        inp, ref, out = (os.path.join(tmp, n) for n in ("in.jsonl", "ref.jsonl", "out.jsonl"))
        status = os.path.join(tmp, "status.json")
        write_requests(inp, args.requests, vocab)
        base = shlex.split(args.launch) + [args.deepinfer, "generate", "--model", args.model, "--input", inp,
                                           "--max-running", "16"]
        if args.deploy:
            base += ["--deploy", args.deploy]
        log_path = os.path.join(tmp, "log.txt")
        log = open(log_path, "a")

        def run(extra, env=None, expect=0):
            proc = start(base + extra, log, env)
            code = proc.wait(timeout=600)
            if code != expect:
                log.flush()
                sys.stdout.write(open(log_path).read()[-4000:])
                raise SystemExit(f"exit {code} (expected {expect}): {' '.join(base + extra)}")

        t0 = time.time()
        run(["--ordered-output", "--output", ref])
        whole = time.time() - t0
        expected = by_id(ref)
        assert len(expected) == args.requests
        run(["--output", out, "--window", "64"])
        assert by_id(out) == expected, "an uninterrupted durable run differs from the whole run"
        print(f"uninterrupted: {args.requests} results equal the whole run's ({whole:.1f} s a run)")

        # Kills: the whole process group at a tenth, at half, at a random moment; then one inside a write.
        os.remove(out)
        durable = ["--output", out, "--resume", "--sync-interval", "0.2", "--window", "64", "--status-file", status]
        kills = 0
        # The random one comes between the others, the last at half: a 2p2d run writes its results in bursts (tens
        # at a time), so a late kill could land after the last result and leave nothing to resume.
        for target in (args.requests // 10, None, args.requests // 2):
            if target is None:  # a random moment before half (by results written: a time could come after the end)
                now = count_lines(out)
                target = rng.randint(now + 1, max(now + 1, args.requests // 2 - 1))
            proc = start(base + durable, log)
            deadline = time.time() + 300
            while proc.poll() is None and time.time() < deadline and count_lines(out) < target:
                time.sleep(0.02)
            if proc.poll() is not None:
                assert proc.returncode == 0, f"the run to be killed ended {proc.returncode}"
                break
            before = count_lines(out)
            kill_group(proc)
            kills += 1
            print(f"kill -9 with {before} of {args.requests} results in the output")
        done_lines = count_lines(out)
        assert 0 < done_lines < args.requests, f"the kills left {done_lines} results: nothing left to resume"
        # The fault dies inside the 5th write of the resumed run, or the last one where fewer are left (a kill can
        # land after more results than its target: the run writes on while the poll sleeps).
        torn_write = min(5, args.requests - done_lines)
        proc = start(base + durable, log, {"DEEPINFER_FAULT_TORN_WRITE": str(torn_write)})
        proc.wait(timeout=600)
        kill_group(proc)  # (the launcher, if any, ends the other ranks; whatever is left goes too)
        with open(out, "rb") as f:
            data = f.read()
        assert not data.endswith(b"\n"), "the fault should have left a torn last line"
        torn_at = data.rfind(b"\n") + 1
        print(f"a kill inside a write: the output ends in {len(data) - torn_at} bytes of a torn line")
        run(durable)
        got = by_id(out)
        assert got == expected, f"after {kills} kills, a torn write and a resume: {len(got)} results, " \
                                f"{sum(1 for k in got if got[k] != expected.get(k))} differ from the whole run"
        st = json.load(open(status))
        assert st["state"] == "complete" and st["done"] == args.requests and st["remaining"] == 0, st
        print(f"after {kills} kills and a torn write, --resume: {len(got)} results, each id once, equal to the whole "
              f"run; status {st['state']}, {st['done']}/{st['total']}")

        # SIGUSR1 (Slurm's --signal): drain, exit 75, resume.
        os.remove(out)
        proc = start(base + durable + ["--drain-timeout", "60"], log)
        while proc.poll() is None and count_lines(out) < args.requests // 5:
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before the signal"
        os.killpg(proc.pid, signal.SIGUSR1)  # (every rank gets it; world rank 0 acts on it)
        code = proc.wait(timeout=300)
        st = json.load(open(status))
        assert code == 75 and st["state"] == "stopped", (code, st)
        stopped_at = count_lines(out)
        assert count_lines(out) < args.requests and open(out, "rb").read().endswith(b"\n")
        run(durable)
        assert by_id(out) == expected, "the signalled and resumed run differs from the whole run"
        print(f"SIGUSR1: drained with {stopped_at} results, exit 75, status stopped; --resume completes it, equal")

        ordered = os.path.join(tmp, "ordered.jsonl")
        subprocess.run([args.deepinfer, "order-results", "--input", inp, "--results", out, "--output", ordered],
                       check=True, capture_output=True, timeout=120)
        assert open(ordered, "rb").read() == open(ref, "rb").read(), "order-results differs from --ordered-output"
        print("order-results: the durable output in input order is the whole run's, byte for byte")


if __name__ == "__main__":
    main()
