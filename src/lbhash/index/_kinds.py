"""The index kinds: kind name -> engine class. Below both `CodeIndex` and `storage`, which
each look engines up by kind (so neither imports the other for it)."""

from lbhash.index._engines import FlatEngine, MultiHashEngine
from lbhash.index._ivf import IVFEngine

ENGINES = {engine.kind: engine for engine in (FlatEngine, IVFEngine, MultiHashEngine)}
KINDS = tuple(ENGINES)
