"""Agent requests: every field is bounded before any of it reaches the verifier."""

from __future__ import annotations

import base64
import binascii
import re

from rest_framework import serializers

from attest.inventory import MAX_FIELD_CHARS
from ledger.contract.governance import MAX_REGISTRARS
from webapp.attestation.telemetry import MAX_TELEMETRY_CHARS

MAX_PUBLIC_BYTES = 1024  # a TPM2B_PUBLIC for RSA-2048 is ~ 300 bytes
MAX_CERT_BYTES = 4096
MAX_QUOTE_BYTES = 1024
MAX_SIGNATURE_BYTES = 1024
MAX_ANSWER_BYTES = 64
HEX_DIGEST = re.compile(r"^[0-9a-fA-F]{2,128}$")
MAX_PCRS = 24
MAX_GPUS = 64  # GPUs one node may report


class Base64Field(serializers.CharField):
    def __init__(self, *, max_bytes: int, **kwargs) -> None:
        self.max_bytes = max_bytes
        super().__init__(max_length=4 * ((max_bytes + 2) // 3), **kwargs)

    def to_internal_value(self, data):
        text = super().to_internal_value(data)
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise serializers.ValidationError("not valid base64") from None
        if not raw or len(raw) > self.max_bytes:
            raise serializers.ValidationError(f"must decode to 1..{self.max_bytes} bytes")
        return raw


class EnrolSerializer(serializers.Serializer):
    ek_public = Base64Field(max_bytes=MAX_PUBLIC_BYTES)
    ek_certificate = Base64Field(max_bytes=MAX_CERT_BYTES, required=False)
    ak_public = Base64Field(max_bytes=MAX_PUBLIC_BYTES)


class PcrEvidenceSerializer(serializers.Serializer):
    """A quote, its signature and the PCR values it covers."""

    quote = Base64Field(max_bytes=MAX_QUOTE_BYTES)
    signature = Base64Field(max_bytes=MAX_SIGNATURE_BYTES)
    pcr_values = serializers.DictField(
        child=serializers.DictField(child=serializers.RegexField(HEX_DIGEST)),
        allow_empty=False,
    )
    # the readings since the node's previous quote, canonical CSV rows (attest.readings);
    # the quote binds their digests (docs/billing.md, "Attested telemetry")
    telemetry = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        max_length=MAX_TELEMETRY_CHARS,
    )

    def validate_pcr_values(self, banks):
        values = {}
        for bank, pcrs in banks.items():
            if bank not in ("sha1", "sha256", "sha384", "sha512") or len(pcrs) > MAX_PCRS:
                raise serializers.ValidationError(f"unknown bank {bank!r} or too many PCRs")
            try:
                values[bank] = {int(i): bytes.fromhex(v) for i, v in pcrs.items()}
            except ValueError:
                raise serializers.ValidationError(
                    f"bank {bank!r}: PCR index not a number"
                ) from None
            if any(not 0 <= i < MAX_PCRS for i in values[bank]):
                raise serializers.ValidationError(f"bank {bank!r}: PCR index out of range")
        return values


class QuoteSerializer(PcrEvidenceSerializer):
    nonce = serializers.RegexField(r"^[0-9a-fA-F]{64}$")


class GpuSerializer(serializers.Serializer):
    """One GPU as NVML reports it (attest.inventory checks the characters)."""

    uuid = serializers.CharField(max_length=MAX_FIELD_CHARS, trim_whitespace=False)
    name = serializers.CharField(max_length=MAX_FIELD_CHARS, trim_whitespace=False)
    serial = serializers.CharField(
        max_length=MAX_FIELD_CHARS, allow_blank=True, trim_whitespace=False
    )


class RegistrarAnswerSerializer(serializers.Serializer):
    """The TPM's ActivateCredential answer to one organisation's registrar's challenge."""

    org = serializers.RegexField(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    challenge_id = serializers.RegexField(r"^[0-9a-f]{32}$")
    answer = Base64Field(max_bytes=MAX_ANSWER_BYTES)


class ActivateSerializer(serializers.Serializer):
    """The ActivateCredential answers (this server's challenge, each registrar's) and the
    quote over the node's GPU inventory."""

    answer = Base64Field(max_bytes=MAX_ANSWER_BYTES)
    registrar_answers = RegistrarAnswerSerializer(
        many=True, required=False, max_length=MAX_REGISTRARS
    )
    inventory = GpuSerializer(many=True, allow_empty=False, max_length=MAX_GPUS)
    enrolment_quote = PcrEvidenceSerializer()


class ReportSerializer(serializers.Serializer):
    """Why the agent stopped: a code (attest.agent.supervise.AUTH_REFUSALS) and the TPM's
    message."""

    code = serializers.RegexField(r"^[a-z][a-z0-9_]{0,39}$")
    detail = serializers.CharField(max_length=MAX_FIELD_CHARS, allow_blank=True)
