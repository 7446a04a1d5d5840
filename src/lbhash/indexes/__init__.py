"""Index directories, over the search engine (lbhash.index): `index_dir` (`build_index`, `open_index`,
`IndexDirectory`: add, remove, describe), what an index is built from (`index_inputs`: a run's items,
codes, embeddings and model; the one module that reads a run, tests/test_architecture.py), its instance
codes and their transform (`instance_codes`, learned by `instance_learning`), where its items came from
(`origins`), the copies inside an index or a folder (`duplicates`, `folder_copies`) and the values
indexes and searches take for options left out, which help texts state (`defaults`).
"""
