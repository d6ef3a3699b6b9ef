// Drives the official Node Fabric Gateway client against a gateway address, doing the same
// calls as tests/fabric/test_node_conformance.py does with the Python client, so the test
// can compare the requests both clients put on the wire.
// Env: GATEWAY_ADDRESS, MSP_ID, CERT_PEM_FILE, KEY_PEM_FILE. Prints one JSON line of results.
'use strict';
const crypto = require('node:crypto');
const fs = require('node:fs');
const grpc = require('@grpc/grpc-js');
const { connect, hash, signers } = require('@hyperledger/fabric-gateway');

async function main() {
    const client = new grpc.Client(process.env.GATEWAY_ADDRESS, grpc.credentials.createInsecure());
    const gateway = connect({
        client,
        identity: { mspId: process.env.MSP_ID, credentials: fs.readFileSync(process.env.CERT_PEM_FILE) },
        signer: signers.newPrivateKeySigner(crypto.createPrivateKey(fs.readFileSync(process.env.KEY_PEM_FILE))),
        hash: hash.sha256,
    });
    try {
        const network = gateway.getNetwork('wattlease');
        const contract = network.getContract('wattlease');
        const evaluated = await contract.evaluateTransaction('GetNode', '{"node_id":"n1"}');
        const submitted = await contract.submitTransaction('RegisterNode', '{"node_id":"n1"}');
        const events = await network.getChaincodeEvents('wattlease', { startBlock: BigInt(5) });
        let first;
        try {
            for await (const event of events) { first = event; break; }
        } finally {
            events.close();
        }
        console.log(JSON.stringify({
            evaluated: Buffer.from(evaluated).toString(),
            submitted: Buffer.from(submitted).toString(),
            event: { name: first.eventName, block: Number(first.blockNumber), txId: first.transactionId },
        }));
    } finally {
        gateway.close();
        client.close();
    }
}

main().catch((err) => { console.error(err); process.exit(1); });
