// The bench workload through the official Node Fabric Gateway client.
// Env: GATEWAY_ADDRESS, MSP_ID, CERT_PEM_FILE, KEY_PEM_FILE, CHANNEL, CHAINCODE, FN,
// ARG_TEMPLATE (with {i}, and {ak} filled from AKS_FILE's line i), COUNT, CONCURRENCY; TLS_CA_FILE and HOST_ALIAS unless PLAINTEXT=1.
// Prints one JSON line: {"committed": n, "seconds": s, "latencies_ms": [...]}.
'use strict';
const crypto = require('node:crypto');
const fs = require('node:fs');
const grpc = require('@grpc/grpc-js');
const { connect, hash, signers } = require('@hyperledger/fabric-gateway');

function grpcClient(env) {
    if (env.PLAINTEXT === '1') {
        return new grpc.Client(env.GATEWAY_ADDRESS, grpc.credentials.createInsecure());
    }
    const options = env.HOST_ALIAS ? { 'grpc.ssl_target_name_override': env.HOST_ALIAS } : {};
    const creds = grpc.credentials.createSsl(fs.readFileSync(env.TLS_CA_FILE));
    return new grpc.Client(env.GATEWAY_ADDRESS, creds, options);
}

async function main(env) {
    const count = Number(env.COUNT);
    const concurrency = Number(env.CONCURRENCY);
    const client = grpcClient(env);
    const gateway = connect({
        client,
        identity: { mspId: env.MSP_ID, credentials: fs.readFileSync(env.CERT_PEM_FILE) },
        signer: signers.newPrivateKeySigner(crypto.createPrivateKey(fs.readFileSync(env.KEY_PEM_FILE))),
        hash: hash.sha256,
    });
    const contract = gateway.getNetwork(env.CHANNEL).getContract(env.CHAINCODE);
    const aks = env.AKS_FILE ? fs.readFileSync(env.AKS_FILE, 'utf8').split('\n') : [];
    const latencies = [];
    let next = 0;
    let committed = 0;
    async function worker() {
        while (next < count) {
            const i = next++;
            const started = process.hrtime.bigint();
            let arg = env.ARG_TEMPLATE.replaceAll('{i}', String(i));
            if (aks.length) arg = arg.replaceAll('{ak}', aks[i]);
            await contract.submitTransaction(env.FN, arg);
            latencies.push(Number(process.hrtime.bigint() - started) / 1e6);
            committed++;
        }
    }
    const t0 = process.hrtime.bigint();
    try {
        await Promise.all(Array.from({ length: concurrency }, worker));
    } finally {
        gateway.close();
        client.close();
    }
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    console.log(JSON.stringify({ committed, seconds, latencies_ms: latencies }));
}

main(process.env).catch((err) => { console.error(err); process.exit(1); });
