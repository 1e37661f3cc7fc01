"""Results: what is made of many signatures, and runs split into parts.

DTW and clustering (`comparison`), the options that change the numbers and where the signatures compared differ in
them (`differences`), correlation with accuracy (`significance`), shard parts (`shards`), Ray (`executors`).
"""
