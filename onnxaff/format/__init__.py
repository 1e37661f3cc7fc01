"""The signature format: the JSON a run writes and every reader reads, and nothing of how it was computed.

`signature` (the Signature object, read and written atomically), `siteentry` (a site's, a stage's and a score's
typed entries), `schema` (the checks, read off those declarations), `tables` (its table form), `protocol` (rows per
chunk and per example, estimators, intervals; the named protocols).
"""
