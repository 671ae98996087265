#!/usr/bin/env python3
"""check_durable_full_disk.py --deepinfer BIN --model M [--disk fsize|tmpfs] [--launch L --deploy D]

A durable generate job whose output can no longer grow: the job fails with one message naming the output and the
error, exit non-zero; the output keeps whole lines only (each a finished result); the status file says "failed";
and once there is room again, --resume completes it: each id once, equal to an uninterrupted run.
  --disk fsize: a file-size limit (writes past it fail with EFBIG): any machine, one rank (under mpirun the limit
                would bind MPI's shared-memory files too);
  --disk tmpfs: the output on a full 16 KB tmpfs (ENOSPC), grown afterwards: needs root and mount (exits 77, skipped,
                where that is refused).
"""
import argparse
import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import tempfile

LIMIT = 16 * 1024  # bytes: the output stops growing part-way through the job


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deepinfer", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--launch", default="")
    ap.add_argument("--deploy", default="")
    ap.add_argument("--disk", choices=("fsize", "tmpfs"), default="fsize")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        disk = os.path.join(tmp, "disk")
        os.mkdir(disk)
        if args.disk == "tmpfs":
            if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={LIMIT}", "tmpfs", disk],
                                                   capture_output=True).returncode != 0:
                print("skip: cannot mount a tmpfs here (needs root)")
                sys.exit(77)
        try:
            check(args, tmp, disk)
        finally:
            if args.disk == "tmpfs":
                subprocess.run(["umount", disk], capture_output=True)


def check(args, tmp, disk):
    inp = os.path.join(tmp, "in.jsonl")
    with open(inp, "w") as f:
        for i in range(300):
            f.write(json.dumps({"id": f"r{i}", "prompt_token_ids": [3 + i % 50, 4, 5 + i % 7],
                                "max_new_tokens": 3 + i % 4}) + "\n")

    def generate(out, *extra, limited=False):
        cmd = shlex.split(args.launch) + [args.deepinfer, "generate", "--model", args.model, "--load-format",
                                          "dummy", "--input", inp, "--output", out, *extra]
        if args.deploy:
            cmd += ["--deploy", args.deploy]

        def limit():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))
        limited = limited and args.disk == "fsize"
        # The limit binds MPI's own files too: PMIx keeps its store in memory (hash), not in a file it cannot grow.
        env = dict(os.environ, PMIX_MCA_gds="hash")
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env,
                              preexec_fn=limit if limited else None)

    ref = os.path.join(tmp, "ref.jsonl")
    done = generate(ref)
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    reference = {json.loads(line)["id"]: json.loads(line) for line in open(ref)}
    assert os.path.getsize(ref) > 2 * LIMIT, "the input must outgrow the limit"

    out, status = os.path.join(disk, "out.jsonl"), os.path.join(tmp, "status.json")
    full = generate(out, "--status-file", status, limited=True)
    text = full.stdout + full.stderr
    assert full.returncode != 0, text[-2000:]
    reason = "File too large" if args.disk == "fsize" else "No space left on device"
    message = f"writing --output '{out}' failed: {reason}"
    assert text.count(message) == 1, (message, text[-3000:])
    data = open(out, "rb").read()
    assert 0 < len(data) <= LIMIT and data.endswith(b"\n"), (len(data), data[-200:])
    kept = [json.loads(line) for line in data.decode().splitlines()]
    for r in kept:
        assert r == reference[r["id"]], (r, reference[r["id"]])
    state = json.load(open(status))["state"]
    assert state == "failed", state
    print(f"full: exit {full.returncode}, one message ({message!r}), {len(kept)} whole lines kept, "
          f"status {state}")

    if args.disk == "tmpfs":  # room again
        subprocess.run(["mount", "-o", "remount,size=4m", disk], check=True)
    resumed = generate(out, "--status-file", status, "--resume")
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-2000:]
    lines = [json.loads(line) for line in open(out)]
    ids = [r["id"] for r in lines]
    assert len(ids) == len(set(ids)) == len(reference), (len(ids), len(set(ids)), len(reference))
    assert {r["id"]: r for r in lines} == reference
    assert json.load(open(status))["state"] == "complete"
    print(f"--resume with room again: {len(lines)} lines, each id once, equal to the uninterrupted run")


if __name__ == "__main__":
    main()
