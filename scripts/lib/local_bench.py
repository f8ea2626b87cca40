"""scripts/local-bench's client: drives one server, then reports every server side by side.

  local_bench.py openai URL PID TOKENS        llama-server (OpenAI-compatible chat API, its own chat template)
  local_bench.py ldp URL PID TOKENS LDP_BIN    `ldp serve --backend local` (through `ldp call`)
  local_bench.py report MODEL JSON...          the Markdown table and the ratios

Each run measures, greedy: 1 session and 4 concurrent sessions, turn 1 and turn 3 of each (turns 1-3 asked in
order in each session, the answers fed back as history), tokens/s as generated tokens over the client's wall time
of that turn (the prompt's decoding included, as a caller sees it); for 4 sessions the turn's tokens of all four
over the longest of their times. Then the server's peak and current resident memory (VmHWM, VmRSS).
"""

import concurrent.futures
import json
import os
import subprocess
import sys
import time
import urllib.request

QUESTIONS = [
    "Write a long story about a dragon who learns to cook.",
    "Continue the story with the dragon's first dinner party.",
    "Now tell the same story from the point of view of the guests.",
]
FRANCE = "What is the capital of France?"


def memory(pid):
    out = {}
    with open("/proc/%s/status" % pid) as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out[key] = int(value.split()[0]) * 1024
    return out


def openai_session(url, tokens):
    """Three turns of one session against llama-server; (tokens, seconds) per turn."""
    messages, out = [], []
    for question in QUESTIONS:
        messages.append({"role": "user", "content": question})
        body = {"messages": messages, "max_tokens": tokens, "temperature": 0, "cache_prompt": True}
        request = urllib.request.Request(
            url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
        start = time.monotonic()
        with urllib.request.urlopen(request, timeout=600) as response:
            answer = json.load(response)
        elapsed = time.monotonic() - start
        text = answer["choices"][0]["message"]["content"]
        messages.append({"role": "assistant", "content": text})
        out.append((answer["usage"]["completion_tokens"], elapsed))
    return out


def openai_answer(url, question, tokens):
    body = {"messages": [{"role": "user", "content": question}], "max_tokens": tokens, "temperature": 0}
    request = urllib.request.Request(
        url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.load(response)["choices"][0]["message"]["content"]


def ldp_session(url, ldp, cap):
    """Three turns of one LDP session (`ldp call --then`); (tokens, seconds) per turn, from each result's
    provenance and the client's own elapsed time. Provenance counts prompt and answer together (`tokens_used`):
    an answer cut at the cap (these stories always are; llama-server reports the same 128) counts as `cap`."""
    argv = [ldp, "call", url, "chat", QUESTIONS[0], "--json"]
    for question in QUESTIONS[1:]:
        argv += ["--then", question]
    lines = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.splitlines()
    results = [json.loads(l) for l in lines if l.startswith("{") and '"output"' in l]
    out = []
    for result in results:
        out.append((min(result["provenance"].get("tokens_used", 0), cap), result["elapsed_ms"] / 1000.0))
    return out


def ldp_answer(url, ldp, question):
    lines = subprocess.run([ldp, "call", url, "chat", question, "--json"], check=True, capture_output=True,
                           text=True).stdout.splitlines()
    return next(json.loads(l) for l in lines if '"output"' in l)["output"]


def measure(session):
    rows = {}
    for sessions in (1, 4):
        with concurrent.futures.ThreadPoolExecutor(sessions) as pool:
            runs = list(pool.map(lambda _: session(), range(sessions)))
        for turn in (0, 2):
            generated = sum(run[turn][0] for run in runs)
            seconds = max(run[turn][1] for run in runs)
            rows["%d session%s, turn %d" % (sessions, "s" if sessions > 1 else "", turn + 1)] = {
                "tokens": generated, "seconds": round(seconds, 3), "tokens_per_s": round(generated / seconds, 1)}
    return rows


def main():
    mode = sys.argv[1]
    if mode == "report":
        return report(sys.argv[2], sys.argv[3:])
    url, pid, tokens = sys.argv[2], sys.argv[3], int(sys.argv[4])
    if mode == "openai":
        answer = openai_answer(url, FRANCE, tokens)
        rows = measure(lambda: openai_session(url, tokens))
        name = "llama-server"
    else:
        ldp = sys.argv[5]
        answer = ldp_answer(url, ldp, FRANCE)
        rows = measure(lambda: ldp_session(url, ldp, tokens))
        name = "ldp"
    json.dump({"name": name, "answer": answer, "rows": rows, "memory": memory(pid)}, sys.stdout)


def report(model, paths):
    runs = [json.load(open(p)) for p in paths]
    for run, path in zip(runs, paths):
        run["name"] = os.path.basename(path)[:-len(".json")]
    size = os.path.getsize(model)
    base = runs[0]
    names = [r["name"] for r in runs]
    print("| run | " + " | ".join("%s tok/s" % n for n in names) + " | " +
          " | ".join("%s / %s" % (n, base["name"]) for n in names[1:]) + " |")
    print("|---" * (1 + len(names) + len(names) - 1) + "|")
    for row in base["rows"]:
        rates = [r["rows"][row]["tokens_per_s"] for r in runs]
        print("| %s | %s | %s |" % (row, " | ".join("%.1f" % x for x in rates),
                                    " | ".join("%.2f" % (x / rates[0]) for x in rates[1:])))
    print()
    print("| server | VmHWM MiB | VmRSS MiB | VmHWM / file size |")
    print("|---|---|---|---|")
    for r in runs:
        m = r["memory"]
        print("| %s | %.0f | %.0f | %.2f |" % (r["name"], m["VmHWM"] / 2**20, m["VmRSS"] / 2**20, m["VmHWM"] / size))
    print()
    print("model file: %.0f MiB" % (size / 2**20))
    for r in runs:
        same = "same as" if r["answer"].startswith(base["answer"][:40]) or base["answer"].startswith(r["answer"][:40]) else "DIFFERENT from"
        print("%s greedy answer to %r (%s %s): %r" % (r["name"], FRANCE, same, base["name"], r["answer"][:120]))


if __name__ == "__main__":
    main()
