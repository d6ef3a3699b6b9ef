"""What every endorsing peer runs: the chaincode, its argument rules and its state layout.

Everything here is deterministic and reads only the ledger and the transaction: a peer
re-runs it to endorse, so no code outside this package decides what the ledger accepts.
"""
