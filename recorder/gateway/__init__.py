"""forge_record.gateway: `forge-record serve`, the recorder as a shared gateway for rollouts.

One gateway process (a replica) is the same in-process mitmproxy, addon, capture and writer
process as `forge-record run`, in reverse mode, in front of one or more upstream model
servers, for many sessions at once. The modules:

    keys        which session a call names, and the proof it carries (a session token)
    upstreams   the upstream servers, health-checked; a session sticks to one of them
    service     the state, all in the store: sessions, tokens (hashed), seqs, finish order
    api         the control API under /api/v1 (admin bearer token), its errors as JSON
    openapi     the OpenAPI document the API serves at /api/v1/openapi.json
    env         what each harness needs in its environment to reach the gateway
    metrics     Prometheus metrics (prometheus-client, the optional `serve` extra)

The mitmproxy side is forge_record.addons.gateway; the command is forge_record.commands.serve;
docs/ROLLOUTS.md describes the whole data path.
"""
