"""A gRPC server with the Gateway service's methods that records every request and answers
with well-formed replies. It stands in for no component under test: it is the meter that
lets tests compare what the Python client and the official Node client put on the wire."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager

import grpc
from fabric_protos.common import common_pb2
from fabric_protos.gateway import gateway_pb2, gateway_pb2_grpc
from fabric_protos.peer import (
    chaincode_event_pb2,
    proposal_pb2,
    proposal_response_pb2,
    transaction_pb2,
)

EVALUATE_RESULT = b"evaluated-result"
SUBMIT_RESULT = b"submitted-result"
COMMIT_BLOCK = 7
EVENT_BLOCK = 5


def prepared_transaction(
    proposal: proposal_pb2.SignedProposal, result: bytes
) -> common_pb2.Envelope:
    """An endorsed transaction around `result`, with the proposal's own header."""
    header = proposal_pb2.Proposal.FromString(proposal.proposal_bytes).header
    action = proposal_pb2.ChaincodeAction(
        response=proposal_response_pb2.Response(status=200, payload=result)
    )
    prp = proposal_response_pb2.ProposalResponsePayload(extension=action.SerializeToString())
    cap = transaction_pb2.ChaincodeActionPayload(
        action=transaction_pb2.ChaincodeEndorsedAction(
            proposal_response_payload=prp.SerializeToString()
        )
    )
    tx = transaction_pb2.Transaction(
        actions=[transaction_pb2.TransactionAction(payload=cap.SerializeToString())]
    )
    payload = common_pb2.Payload(
        header=common_pb2.Header.FromString(header), data=tx.SerializeToString()
    )
    return common_pb2.Envelope(payload=payload.SerializeToString())


class RecordingGateway(gateway_pb2_grpc.GatewayServicer):
    def __init__(self) -> None:
        self.requests: dict[str, list[object]] = {}
        self.commit_code = transaction_pb2.VALID
        self.evaluate_status = 200
        self.submit_failure: grpc.StatusCode | None = None
        self.endorse_failure: tuple[grpc.StatusCode, str] | None = None

    def _keep(self, name: str, request: object) -> None:
        self.requests.setdefault(name, []).append(request)

    def Evaluate(self, request, context):  # type: ignore[no-untyped-def]
        self._keep("Evaluate", request)
        return gateway_pb2.EvaluateResponse(
            result=proposal_response_pb2.Response(
                status=self.evaluate_status, payload=EVALUATE_RESULT, message="refused"
            )
        )

    def Endorse(self, request, context):  # type: ignore[no-untyped-def]
        self._keep("Endorse", request)
        if self.endorse_failure is not None:
            context.abort(*self.endorse_failure)
        return gateway_pb2.EndorseResponse(
            prepared_transaction=prepared_transaction(request.proposed_transaction, SUBMIT_RESULT)
        )

    def Submit(self, request, context):  # type: ignore[no-untyped-def]
        self._keep("Submit", request)
        if self.submit_failure is not None:
            context.abort(self.submit_failure, "failed to send transaction to the orderer")
        return gateway_pb2.SubmitResponse()

    def CommitStatus(self, request, context):  # type: ignore[no-untyped-def]
        self._keep("CommitStatus", request)
        return gateway_pb2.CommitStatusResponse(result=self.commit_code, block_number=COMMIT_BLOCK)

    def ChaincodeEvents(self, request, context):  # type: ignore[no-untyped-def]
        self._keep("ChaincodeEvents", request)
        yield gateway_pb2.ChaincodeEventsResponse(
            block_number=EVENT_BLOCK,
            events=[
                chaincode_event_pb2.ChaincodeEvent(
                    chaincode_id="wattlease", tx_id="t1", event_name="NodeRegistered", payload=b"{}"
                )
            ],
        )


@contextmanager
def recording_gateway() -> Iterator[tuple[RecordingGateway, int]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    recorder = RecordingGateway()
    gateway_pb2_grpc.add_GatewayServicer_to_server(recorder, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield recorder, port
    finally:
        server.stop(None).wait()
