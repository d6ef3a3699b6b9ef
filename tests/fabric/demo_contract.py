"""A minimal contract for the shim-adapter tests: one write that sets an event, one read."""

from __future__ import annotations

from fabric_chaincode_python.fabric_contract_api import (
    Contract,
    ContractChaincode,
    TransactionContext,
)


class DemoContract(Contract):
    Name = "demo"

    async def Put(self, ctx: TransactionContext, key: str, value: str) -> str:
        stub = ctx.get_stub()
        await stub.put_state(key, value.encode())
        stub.set_event("Put", f"{key}={value}")
        return value

    async def Get(self, ctx: TransactionContext, key: str) -> str:
        value = await ctx.get_stub().get_state(key)
        return bytes(value or b"").decode("utf-8", "replace")


def new_chaincode() -> ContractChaincode:
    return ContractChaincode.new_chaincode(DemoContract())
