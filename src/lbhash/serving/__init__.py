"""Searching an index, as `lbhash search` and the service (lbhash.service) serve it: raw inputs to
queries and the search of an index by them (`searcher`: `QueryEncoder`, `Searcher`, `search_index`),
the live index the service serves (`index_store`: `Store`, `IndexStore` with its write-ahead log, `wal`,
and `MilvusStore`), what the service asks of the engines (`requests`: its checked searches, `Search`),
the images it keeps beside an index (`uploads`) and the searches of edited copies of indexed photos
(`copies_evaluation`: `lbhash evaluate-copies`).
"""
