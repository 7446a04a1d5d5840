"""lbhash: learning binary hash codes with the lower-bound objective (NeurIPS 2022).

Layers, each importing only those below it:
codes -> centers -> surrogate -> methods -> models -> data -> train -> evaluate -> index -> cli
"""

__version__ = "0.1.0"
