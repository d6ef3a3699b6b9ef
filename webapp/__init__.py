"""The Wattlease Django project: settings, URLs, ASGI entry point and the domain apps that
compose the pure libraries (attest, chaincode_client, scheduler)."""
