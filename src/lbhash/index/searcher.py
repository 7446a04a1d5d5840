class Searcher: pass
