"""Agent card signing with the a2a-sdk (its `signing` extra), driven by interop tests.

Usage:
  card_signing.py canonicalize            < card.json   prints the SDK's canonical form
  card_signing.py verify CARD_URL JWKS_URL                verifies a served card's signatures
  card_signing.py sign JKU OUT_DIR        < card.json   signs with a new ES256 key

`canonicalize` parses the card as the SDK client does (unknown fields ignored) and prints
the bytes its signer and verifier cover, with no trailing newline. `verify` fetches the
card and the JWKS over HTTP and runs `create_signature_verifier` with a key provider that
looks the header's `kid` up in that JWKS; it prints {"ok": true} or exits 1 with the error.
`sign` generates a P-256 key, signs the card with `create_agent_card_signer` (protected
header alg ES256, kid, typ JOSE, jku JKU) and writes OUT_DIR/card.json (the signed card)
and OUT_DIR/jwks.json (the public key).
"""

from __future__ import annotations

import json
import sys

import httpx
from cryptography.hazmat.primitives.asymmetric import ec
from google.protobuf.json_format import MessageToDict, ParseDict
from jwt.algorithms import ECAlgorithm
from jwt.api_jwk import PyJWK

from a2a.types import AgentCard
from a2a.utils.signing import (
    _canonicalize_agent_card,
    create_agent_card_signer,
    create_signature_verifier,
)


def parse_card(data: dict) -> AgentCard:
    return ParseDict(data, AgentCard(), ignore_unknown_fields=True)


def canonicalize() -> int:
    card = parse_card(json.load(sys.stdin))
    sys.stdout.buffer.write(_canonicalize_agent_card(card).encode('utf-8'))
    return 0


def verify(card_url: str, jwks_url: str) -> int:
    with httpx.Client(timeout=30) as client:
        card = parse_card(client.get(card_url).raise_for_status().json())
        jwks = client.get(jwks_url).raise_for_status().json()

    def key_provider(kid: str | None, jku: str | None) -> PyJWK:
        for key in jwks.get('keys', []):
            if key.get('kid') == kid:
                return PyJWK.from_dict(key)
        raise ValueError(f'no key {kid!r} in {jwks_url} (jku {jku!r})')

    verifier = create_signature_verifier(key_provider, ['EdDSA', 'ES256'])
    try:
        verifier(card)
    except Exception as e:  # noqa: BLE001 - reported to the test
        print(json.dumps({'ok': False, 'error': f'{type(e).__name__}: {e}'}))
        return 1
    print(json.dumps({'ok': True, 'signatures': len(card.signatures)}))
    return 0


def sign(jku: str, out_dir: str) -> int:
    card = parse_card(json.load(sys.stdin))
    private = ec.generate_private_key(ec.SECP256R1())
    public_jwk = json.loads(ECAlgorithm.to_jwk(private.public_key()))
    kid = 'python-test-key'
    public_jwk.update({'kid': kid, 'use': 'sig', 'alg': 'ES256'})
    signer = create_agent_card_signer(
        signing_key=private,
        protected_header={'alg': 'ES256', 'kid': kid, 'typ': 'JOSE', 'jku': jku},
    )
    signed = signer(card)
    with open(f'{out_dir}/card.json', 'w', encoding='utf-8') as f:
        json.dump(MessageToDict(signed), f, ensure_ascii=False)
    with open(f'{out_dir}/jwks.json', 'w', encoding='utf-8') as f:
        json.dump({'keys': [public_jwk]}, f)
    return 0


def main(argv: list[str]) -> int:
    match argv:
        case ['canonicalize']:
            return canonicalize()
        case ['verify', card_url, jwks_url]:
            return verify(card_url, jwks_url)
        case ['sign', jku, out_dir]:
            return sign(jku, out_dir)
        case _:
            print(__doc__, file=sys.stderr)
            return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
