"""What a tenant or the other organisation runs, outside any peer: `ledger verify`, receipts,
`verify-receipt` and `audit-bill`, with trust anchors the auditor chose itself.
"""
