"""The control-flow graph of a function (helpers inlined) and the matcher's safety checks as queries on it.

`graph.py` builds nothing itself: the provider's walk records its events into a `FlowGraph` instead of copying
them into one list per path, merging the partial paths at every join (SSA style: a name defined differently on the
incoming edges gets a fresh value, a *phi*). `checks.py` answers the matcher's per-path questions with reachability
on that graph, so the cost grows with the number of statements, not with the number of paths.
"""
