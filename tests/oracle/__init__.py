"""Today's per-part analyses, frozen as the reference for the vectorised batch analyses.

This is the per-(rank, device) implementation dtrace had before partitions held many parts
(commit 5ca9e08), validated then against TraceLens and HTA. It is kept here, unchanged but for
its imports, as an independent oracle: tests/test_batch_equivalence.py runs it part by part and
checks that every table the batched code computes is equal. It is not part of the package.
"""
