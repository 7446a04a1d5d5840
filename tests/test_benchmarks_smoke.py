"""Every script in benchmarks/ runs in its smoke mode, so that a refactor cannot break a benchmark
silently (issue 59, item 6).

The scripts are found in the folder: a `.sh` file, or a `.py` file with a `__main__` block (the other
`.py` files, `_smoke.py`, `service_load.py` and `encode_rates.py`, are modules the scripts import).
Each runs as `python SCRIPT --smoke` (tiny sizes, seconds; benchmarks/_smoke.py) in a subprocess
and must exit 0 and print the lines of EXPECTED: its ratio lines against the reference it measures
in the same run, or what else it reports. A script missing from EXPECTED fails
`test_every_benchmark_has_a_smoke_run`, so a new benchmark comes with its smoke run. A script that
lacks an optional piece in smoke mode (a Milvus server, a package) prints `smoke run skipped:
REASON` and the test skips with that reason. Nothing is timed: the figures are not asserted.
One-off studies live in studies/ and are not run here.
"""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
SKIPPED = "smoke run skipped:"  # benchmarks/_smoke.py's SKIPPED
NUMBER = r"\d[\d,]*(\.\d+)?"

# script -> regular expressions that its smoke run's output must match, each at least once
EXPECTED = {
    "bench_asgi_ceiling.py": [rf"scan/inprocess = {NUMBER}", rf"raw_app, 2 clients: .* ceiling/inprocess = {NUMBER}",
                              rf"fastapi_app, 2 clients: .* ceiling/inprocess = {NUMBER}"],
    "bench_backbone.py": [r"plain eager fp32 \(reference\) .* x1\.00", rf"channels_last \+ bf16 autocast .* x{NUMBER}",
                          rf"lbhash frozen extraction .* x{NUMBER}", r"training step at 32 px"],
    "bench_bad_requests.py": [rf"{shape}.* \d{{3}} +{NUMBER} s  peak \+{NUMBER} MB over idle, rise \+{NUMBER} MB: (ok|OVER)"
                              for shape in ("tied classes: ", r"bad codes \[1, 1, \.\.\.\]", "unknown keys",
                                            r"one-number rows \[\[1\],\[1\],\.\.\.\] .*, four at once",
                                            "PNG .* to /search/image", "PNG .* to /items/image",
                                            "greyscale PNGs .* through the run", "through the export, four at once")]
                             + [rf"largest rise: \+{NUMBER} MB \(.*\); \d+ of 13 requests OVER"],
    "bench_bank.py": [rf"likelihood alone .* plain {NUMBER} s, fused {NUMBER} s \({NUMBER}x\)",
                      rf"\(DSDH epoch - CSQ epoch\) / plain pass: fused {NUMBER}, plain formula {NUMBER}",
                      r"\(DBDH epoch - CSQ epoch\) / plain pass", rf"DSDH_D +epoch +{NUMBER} s +{NUMBER}x CSQ's"],
    "bench_centers.py": [r"\| 16 \| 10 \| 8 \| 8 \| \d+ \| \d+ \| 8 \(hadamard\) \| 8 \| 8 / 6 / 8 / 6 \|"],
    "bench_changes.py": [rf"\| {kind} \| {change} \| {NUMBER} \| {NUMBER} \| {NUMBER} \|"
                         for kind in ("flat", "ivf", "multihash")
                         for change in ("remove one id", "insert one id below the largest", "upsert one id",
                                        "append one id", r"fold the pending changes \(once, O\(n\)\)")],
    "bench_blend.py": [rf"class code alone, top 10 \(reference\): {NUMBER} ms/query x1\.00",
                       rf"both codes, no float read: {NUMBER} ms/query x{NUMBER}",
                       rf"the default ranking \(both codes, floats\), rows read for the first time: {NUMBER} ms/query "
                       rf"x{NUMBER}", rf"the same queries again, their rows mapped: {NUMBER} ms/query x{NUMBER}",
                       r"codes in memory 40 bytes per item", r"peak memory: \d+ MB"],
    "bench_duplicates.py": [rf"instance searches alone \(reference\): {NUMBER} s, {NUMBER} items/s x1\.00",
                            rf"lbhash duplicates \(index_groups\): {NUMBER} s, {NUMBER} items/s x{NUMBER}",
                            r"groups 30, largest 2; planted pairs found 30 of 30; other pairs 0", r"peak memory \d[\d,]* MB"],
    "bench_evaluate.py": [r"mAP@100: lbhash [\d.]+ +reference [\d.]+ +agree", rf"speed-up +{NUMBER} x",
                          r"peak memory .* MB RSS"],
    "bench_evaluate_million.py": [rf"mAP@all takes {NUMBER}x it", rf"R = all costs {NUMBER}x R = 5000",
                                  r"max \|AP difference\| .* \((exactly equal|equal to rounding)\)"],
    "bench_images.py": [rf"\| smallcnn \(old: resnet20, the old default\) \| gray28 \| \d+ \| \d+ \| {NUMBER}x \| \d+ "
                        rf"\| \d+ \| {NUMBER}x \|", r"smallcnn, 28x28 gray: one epoch of 120 images"],
    "bench_milvus.py": [rf"CodeIndex flat: top-k {NUMBER} ms/query", r"Milvus flat: .* \(same as flat: True, tie-aware",
                        r"Milvus ivf: .* tie-aware recall"],
    "bench_overhead.py": [rf"hash head 1024-1024-bits .* CSQ_D +{NUMBER} ms \({NUMBER}x\) +CSQ_D two passes",
                          rf"backbone-like head 1024-4096-4096-bits .* \({NUMBER}x\)"],
    "bench_quality.py": [r"\| csq \| 0\.\d{4} \+/- 0\.\d{4} \|", r"\| csq_D \| 0\.\d{4} \+/- 0\.\d{4} \|"],
    "bench_rescore.py": [rf"Hamming top 10 \(reference\): {NUMBER} ms/query x1\.00",
                         rf"re-scored, factor 16: {NUMBER} ms/query x{NUMBER} \(\d+ candidates per query, median\)",
                         r"bytes per item: code 8, embedding \d+ \(float16\)"],
    "bench_scale.py": [rf"3000 clustered {kind} +{NUMBER}" for kind in
                       ("faiss-flat", "flat", "ivf", "multihash", "faiss-ivf", "faiss-multihash", "faiss-hnsw")],
    "bench_scan_batch.py": [rf"64-bit: one at a time .* alone/batched = {NUMBER}"],
    "bench_search.py": [rf"flat top-10: .* ratio of best times {NUMBER}x", r"identical to reference: True",
                        rf"ivf .* \({NUMBER} q/s, {NUMBER}x flat\)", rf"multihash .* \({NUMBER} q/s, {NUMBER}x flat\)",
                        r"== clustered"],
    "bench_serve_startup.py": [rf"serve --encoder: median {NUMBER} s", rf"serve --run +: median {NUMBER} s"],
    "bench_service.py": [rf"in process, one at a time .* {NUMBER} searches/s", rf"http2/inprocess = {NUMBER}",
                         r"ONNX Runtime .* codes equal for 100\.0%"],
    "bench_startup.py": [rf"reference: python -c 'import torch': {NUMBER} s",
                         rf"lbhash search idx --codes q\.npy -k 3: {NUMBER} s \({NUMBER} x import torch\)",
                         rf"lbhash encode run .* \({NUMBER} x import torch\)"],
    "bench_threads.py": [rf"1 thread\(s\): as it is +{NUMBER} images/s, beside one competing process +{NUMBER} images/s, "
                         rf"idle/busy = {NUMBER}x", r"default holds up \(idle/busy within 2x\): (yes|NO)"],
    "bench_feature_shards.py": [rf"20 shards of one photo: lookup {NUMBER} s; compacted \(20 merged in {NUMBER} s\) "
                                rf"into 1 shards: lookup {NUMBER} s; ratio {NUMBER}x; every photo found, the same "
                                r"features: True"],
    "bench_tarball.py": [rf"200 members; tarfile {NUMBER} s, lbhash.data.ustar {NUMBER} s .* ratio {NUMBER}x"],
    "bench_train.py": [rf"features csq_D 64 bits +\d+ +{NUMBER} +{NUMBER} +{NUMBER}x",
                       rf"28x28 images smallcnn CSQ 32 bits \(200 images\) +\d+ +{NUMBER} +{NUMBER} +{NUMBER}x",
                       rf"_D step over CSQ step, features 64 bits .* median ratio {NUMBER}x \(floor: .* {NUMBER}x\)",
                       rf"P_pi's step alone, 64 bits .*: {NUMBER} ms, of which its three large matmuls {NUMBER} ms"],
    "profile_service.py": [rf"whole request \(the app, SearchPath\) +{NUMBER} us",
                           rf"handoff to a search thread and back +{NUMBER} us"],
    "profile_step.py": [r"csq smallcnn at 28px: \d+ training images/s", r"Self CPU time total",
                        r"16 bits, one epoch, self CPU: CSQ \d+ ms, CSQ_D \d+ ms"],
    "run_digests.py": [r'"c/codes\.npz": \{', r'"e/log\.jsonl": \[', r'"e/checkpoint'],
}
# scripts whose smoke run is a test of its own (it checks more than the output lines)
ELSEWHERE = {"gpu_suite.sh": "tests/test_gpu_suite.py", "gpu_suite.py": "tests/test_gpu_suite.py"}


def is_script(path: Path) -> bool:
    if path.suffix == ".sh":
        return True
    if path.suffix != ".py":
        return False
    for node in ast.parse(path.read_text()).body:  # `if __name__ == "__main__":`
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return True
    return False


SCRIPTS = sorted(p.name for p in BENCHMARKS.iterdir() if is_script(p))


def test_every_benchmark_has_a_smoke_run():
    assert SCRIPTS, BENCHMARKS
    missing = [name for name in SCRIPTS if name not in EXPECTED and name not in ELSEWHERE]
    assert not missing, f"benchmarks without a smoke run in {Path(__file__).name}'s EXPECTED: {missing}"
    stale = sorted((set(EXPECTED) | set(ELSEWHERE)) - set(SCRIPTS))
    assert not stale, f"listed but not a script in benchmarks/: {stale}"
    for name in SCRIPTS:  # benchmarks/_smoke.py's parse_args adds --smoke
        text = (BENCHMARKS / name).read_text()
        assert "from _smoke import" in text or "--smoke" in text, f"{name} has no --smoke"
    for name, test in ELSEWHERE.items():
        text = (REPO / test).read_text()
        assert "--smoke" in text and "gpu_suite.sh" in text, (name, test)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_benchmark_smoke_run(name, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, str(BENCHMARKS / name), "--smoke"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    skipped = [line for line in done.stdout.splitlines() if line.startswith(SKIPPED)]
    if skipped:
        pytest.skip(f"{name}: {skipped[0][len(SKIPPED):].strip()}")
    misses = [pattern for pattern in EXPECTED[name] if not re.search(pattern, done.stdout)]
    assert not misses, f"{name} --smoke printed no line matching {misses}:\n{done.stdout[-4000:]}"
