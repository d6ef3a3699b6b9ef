"""The Wattlease contract (chaincode) and the embedded ledger engine that runs it in-process
with Fabric's transaction semantics. No Django."""
