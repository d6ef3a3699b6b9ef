# mypy: disable-error-code="attr-defined,name-defined"
# (fabric_protos ships py.typed but no stubs for its generated _pb2 modules)
"""The Fabric Gateway backend of `chaincode_client.interface.LedgerClient`.

One gRPC channel to one peer's Gateway service (Fabric >= 2.4). The gateway does the fan-out:
it picks endorsers that satisfy the chaincode's endorsement policy, forwards the signed
transaction to the orderer and reports commit status from its own ledger. The client only
builds and signs messages: proposals, the prepared transaction, the commit-status and
chaincode-events requests.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import grpc
from fabric_protos.gateway import gateway_pb2, gateway_pb2_grpc
from fabric_protos.orderer import ab_pb2
from fabric_protos.peer import transaction_pb2

from chaincode_client.fabric.config import (
    DEFAULT_ENDORSE_TIMEOUT_S,
    DEFAULT_EVALUATE_TIMEOUT_S,
    DEFAULT_SUBMIT_TIMEOUT_S,
    FabricSettings,
)
from chaincode_client.fabric.errors import peers_disagree, to_ledger_error
from chaincode_client.fabric.identity import Identity, Signer, load_msp
from chaincode_client.fabric.proposals import (
    ProtocolError,
    build_proposal,
    sign_envelope,
    transaction_result,
)
from chaincode_client.interface import (
    ChaincodeEvent,
    EndorsementError,
    LedgerClient,
    LedgerUnavailable,
    Receipt,
    TransactionInvalid,
)

# Peer response statuses at or above this are errors (shim.ERRORTHRESHOLD in Fabric).
PEER_ERROR_THRESHOLD = 400
# Peers one block apart disagree for a few milliseconds (longer on a loaded machine):
# 6 more proposals over ~1.6 s.
ENDORSE_DISAGREE_RETRIES = 6
ENDORSE_DISAGREE_BACKOFF_S = 0.025
MAX_MESSAGE_BYTES = 100 * 1024 * 1024  # the peer's own default gRPC limit
KEEPALIVE_TIME_MS = 60_000
KEEPALIVE_TIMEOUT_MS = 20_000


def open_channel(settings: FabricSettings) -> grpc.Channel:
    """A TLS gRPC channel to the peer named by the settings."""
    chain = None
    key = None
    if settings.tls_client_cert and settings.tls_client_key:
        chain = settings.tls_client_cert.read_bytes()
        key = settings.tls_client_key.read_bytes()
    creds = grpc.ssl_channel_credentials(
        root_certificates=settings.tls_ca.read_bytes(), private_key=key, certificate_chain=chain
    )
    options: list[tuple[str, object]] = [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ]
    if settings.host_alias:
        options.append(("grpc.ssl_target_name_override", settings.host_alias))
    return grpc.secure_channel(settings.endpoint, creds, options=options)


class FabricGatewayClient(LedgerClient):  # explicit, so mypy checks it keeps the interface
    """LedgerClient over a peer's Gateway service."""

    def __init__(
        self,
        channel: grpc.Channel,
        identity: Identity,
        signer: Signer,
        channel_name: str,
        chaincode: str,
        endorsing_orgs: tuple[str, ...] = (),
        commit_timeout_s: float = 60.0,
        confirm: tuple[grpc.Channel, ...] = (),
    ) -> None:
        self._grpc = channel
        self._stub = gateway_pb2_grpc.GatewayStub(channel)
        self.identity = identity
        self._signer = signer
        self.channel_name = channel_name
        self.chaincode = chaincode
        self.endorsing_orgs = endorsing_orgs
        self.commit_timeout_s = commit_timeout_s
        # other organisations' peers that must have committed too (FABRIC_CONFIRM_PEERS)
        self._confirm = confirm

    @classmethod
    def from_settings(cls, settings: FabricSettings) -> FabricGatewayClient:
        identity, signer = load_msp(settings.msp_dir, settings.msp_id)
        return cls(
            open_channel(settings),
            identity,
            signer,
            settings.channel,
            settings.chaincode,
            settings.endorsing_orgs,
            settings.commit_timeout_s,
            tuple(open_channel(settings.peer(e, ca)) for e, ca in settings.confirm_peers),
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> FabricGatewayClient:
        return cls.from_settings(FabricSettings.from_env(env))

    def sign(self, message: bytes) -> bytes:
        return self._signer.sign(message)

    def _proposal(self, fn: str, args: tuple[str, ...], chaincode: str | None = None):  # type: ignore[no-untyped-def]
        return build_proposal(
            self.identity, self._signer, self.channel_name, chaincode or self.chaincode, fn, args
        )

    def evaluate(self, fn: str, *args: str) -> bytes:
        return self.evaluate_chaincode(self.chaincode, fn, *args)

    def evaluate_chaincode(self, chaincode: str, fn: str, *args: str) -> bytes:
        """Evaluate `fn` of another chaincode on the same channel through the same gateway:
        a system chaincode such as `qscc` (blocks by transaction id) or another contract."""
        signed = self._proposal(fn, args, chaincode)
        request = gateway_pb2.EvaluateRequest(
            transaction_id=signed.tx_id,
            channel_id=self.channel_name,
            proposed_transaction=signed.proposal,
        )
        try:
            response = self._stub.Evaluate(request, timeout=DEFAULT_EVALUATE_TIMEOUT_S)
        except grpc.RpcError as err:
            raise to_ledger_error("evaluate", err) from None
        if response.result.status >= PEER_ERROR_THRESHOLD:
            raise EndorsementError(
                f"evaluate {chaincode}.{fn}: chaincode returned {response.result.status}: "
                f"{response.result.message}"
            )
        return bytes(response.result.payload)

    def submit(self, fn: str, *args: str) -> Receipt:
        return self.submit_async(fn, *args).receipt()

    def _endorse(self, fn: str, args: tuple[str, ...]):  # type: ignore[no-untyped-def]
        """Endorse a new proposal. When the peers simulated different results (a block had
        reached one organisation's peer and not yet the other's), nothing was ordered: a new
        proposal a moment later normally agrees, so that case is retried a few times here
        before it reaches the caller as LedgerUnavailable."""
        for attempt in range(ENDORSE_DISAGREE_RETRIES + 1):
            signed = self._proposal(fn, args)
            try:
                endorsed = self._stub.Endorse(
                    gateway_pb2.EndorseRequest(
                        transaction_id=signed.tx_id,
                        channel_id=self.channel_name,
                        proposed_transaction=signed.proposal,
                        endorsing_organizations=list(self.endorsing_orgs),
                    ),
                    timeout=DEFAULT_ENDORSE_TIMEOUT_S,
                )
                return signed, endorsed
            except grpc.RpcError as err:
                own = self.identity.msp_id
                if attempt == ENDORSE_DISAGREE_RETRIES or not peers_disagree(err, own):
                    raise to_ledger_error("endorse", err, own) from None
                time.sleep(ENDORSE_DISAGREE_BACKOFF_S * 2**attempt)
        raise AssertionError("unreachable")

    def check_endorsable(self, fn: str, *args: str) -> None:
        """Have every endorsing organisation endorse `fn` and order nothing. Raises
        LedgerUnavailable while the gateway cannot yet meet the endorsement policy: right
        after a peer starts or a chaincode is defined, before gossip has told this peer that
        the other organisations' peers run it."""
        self._endorse(fn, args)

    def submit_async(self, fn: str, *args: str) -> FabricCommit:
        """Endorse and submit to the orderer; the commit status is asked for by receipt()."""
        signed, endorsed = self._endorse(fn, args)
        try:
            result = transaction_result(endorsed.prepared_transaction)
        except ProtocolError as exc:
            raise EndorsementError(f"endorse {fn}: unreadable prepared transaction: {exc}") from exc
        envelope = sign_envelope(endorsed.prepared_transaction, self._signer)
        try:
            self._stub.Submit(
                gateway_pb2.SubmitRequest(
                    transaction_id=signed.tx_id,
                    channel_id=self.channel_name,
                    prepared_transaction=envelope,
                ),
                timeout=DEFAULT_SUBMIT_TIMEOUT_S,
            )
        except grpc.RpcError as err:
            raise to_ledger_error("submit", err) from None
        return FabricCommit(signed.tx_id, result, self)

    def commit_status(self, tx_id: str) -> tuple[str, int]:
        """(validation code name, block number) of a transaction; blocks until committed on
        the gateway peer and on every peer of FABRIC_CONFIRM_PEERS."""
        request = gateway_pb2.CommitStatusRequest(
            transaction_id=tx_id,
            channel_id=self.channel_name,
            identity=self.identity.serialized(),
        ).SerializeToString()
        signed = gateway_pb2.SignedCommitStatusRequest(
            request=request, signature=self._signer.sign(request)
        )
        try:
            status = self._stub.CommitStatus(signed, timeout=self.commit_timeout_s)
            for channel in self._confirm:  # the same block reaches every peer; wait for it
                gateway_pb2_grpc.GatewayStub(channel).CommitStatus(
                    signed, timeout=self.commit_timeout_s
                )
        except grpc.RpcError as err:
            raise to_ledger_error("commit_status", err) from None
        try:
            code = transaction_pb2.TxValidationCode.Name(status.result)
        except ValueError:
            code = f"UNKNOWN_CODE_{status.result}"
        return code, int(status.block_number)

    def events(self, start_block: int = 0) -> Iterator[ChaincodeEvent]:
        if start_block < 0:
            raise ValueError(f"start_block {start_block} is negative")
        request = gateway_pb2.ChaincodeEventsRequest(
            channel_id=self.channel_name,
            chaincode_id=self.chaincode,
            identity=self.identity.serialized(),
            start_position=ab_pb2.SeekPosition(specified=ab_pb2.SeekSpecified(number=start_block)),
        ).SerializeToString()
        call = self._stub.ChaincodeEvents(
            gateway_pb2.SignedChaincodeEventsRequest(
                request=request, signature=self._signer.sign(request)
            )
        )
        return _event_stream(call)

    def close(self) -> None:
        self._grpc.close()
        for channel in self._confirm:
            channel.close()


@dataclass(frozen=True)
class FabricCommit:
    """PendingCommit over the Gateway: receipt() asks the peer's CommitStatus."""

    tx_id: str
    _result: bytes
    _client: FabricGatewayClient

    def receipt(self) -> Receipt:
        code, block = self._client.commit_status(self.tx_id)
        receipt = Receipt(
            tx_id=self.tx_id, block_number=block, validation_code=code, payload=self._result
        )
        if not receipt.valid:
            raise TransactionInvalid(receipt)
        return receipt


def _event_stream(call) -> Iterator[ChaincodeEvent]:  # type: ignore[no-untyped-def]
    """Flatten the gateway's per-block responses; closing the iterator cancels the call."""
    try:
        for response in call:
            for event in response.events:
                yield ChaincodeEvent(
                    block_number=int(response.block_number),
                    tx_id=event.tx_id,
                    name=event.event_name,
                    payload=bytes(event.payload),
                )
    except grpc.RpcError as err:
        if err.code() != grpc.StatusCode.CANCELLED:
            raise to_ledger_error("events", err) from None
        raise LedgerUnavailable("chaincode event stream cancelled") from None
    finally:
        call.cancel()
