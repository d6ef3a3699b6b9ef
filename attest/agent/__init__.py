"""The node agent's TPM side (tpm2-pytss). Import only where a TPM is used: the verifier
modules never import this package, so the chaincode does not need tpm2-pytss."""

from __future__ import annotations

from attest.agent.tpm import AK_ECC, AK_RSA, Agent, AkKey, EnrolmentRequest, QuoteEvidence

__all__ = ["AK_ECC", "AK_RSA", "Agent", "AkKey", "EnrolmentRequest", "QuoteEvidence"]
