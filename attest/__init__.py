"""TPM 2.0 attestation: the agent side (tpm2-pytss against a TPM or swtpm) and the verifier
side (pure `cryptography`). No Django: the chaincode imports the verifier."""
