"""`python -m lbhash.index.precompile` (which `make install` runs) compiles the searches' kernels for every
type the index calls them with: after it, searches of every code width, in memory and memory-mapped from
a saved index, ranked and in Hamming order, by the exact scan and by the chunk tables, compile nothing more."""

import subprocess
import sys

SEARCH_AFTER_PRECOMPILE = """
import sys, tempfile
import numpy as np
from lbhash.index import CodeIndex, Queries, blended_search
from lbhash.index import _lookup
from lbhash.index.precompile import kernels, precompile, signatures

_lookup.LOOKUP_MIN = 256  # the instance codes' chunk tables (multi-index hashing) at 300 items

count = precompile()
assert count == sum(len(s) for s in signatures().values()), count
def compiled():
    return {name: len(kernel.signatures) for name, kernel in kernels().items()}
before = compiled()
rng = np.random.default_rng(5)
for bits in (8, 16, 32, 64, 128):
    width = bits // 8
    index = CodeIndex(bits, embedding_dim=8, instance_bits=64)
    emb = rng.random((300, 8))
    index.add(rng.integers(0, 256, (300, width), dtype=np.uint8), embeddings=emb,
              instance=rng.integers(0, 256, (300, 8), dtype=np.uint8))
    with tempfile.TemporaryDirectory() as folder:
        index.save(folder + "/idx")
        for searched in (index, CodeIndex.load(folder + "/idx")):
            searched.warm()  # the compiled scan, at any size from now on
            q, qi = searched.get_codes([0, 1]), searched.get_instance_codes([0, 1])
            assert searched.search(q, 5)[1][0, 0] == 0
            for queries in (Queries(q, emb[:2], qi, np.full(8, 0.5)), Queries(q, instance=qi), Queries(q, emb[:2])):
                assert blended_search(searched, queries, 5).ids[0, 0] == 0
after = compiled()
print({name: (before[name], after[name]) for name in before if after[name] != before[name]})
"""


def test_searches_after_precompile_compile_nothing():
    done = subprocess.run([sys.executable, "-c", SEARCH_AFTER_PRECOMPILE], capture_output=True, text=True,
                          timeout=170)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "{}", done.stdout  # kernel: (signatures after precompile, after the searches)
