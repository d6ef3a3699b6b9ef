"""One client interface to the ledger (evaluate / submit / events / receipts) with two
backends: the embedded engine and the Fabric Gateway. No Django."""
