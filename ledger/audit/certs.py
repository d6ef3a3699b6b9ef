"""X.509 certificates from untrusted bytes, read once with every field a verifier uses.

`cryptography` parses a certificate's names lazily: a name attribute whose value has an ASN.1
tag it has no string type for raises a bare KeyError when the subject or issuer is first
read (CI's fuzz test of the Fabric receipt verifier met one, tag 76, in a mutated block's
orderer identity), a BIT STRING value under any attribute but X500UniqueIdentifier raises
TypeError (the fuzz test of this module met it), and an unknown X.509 version raises
InvalidVersion, which is no ValueError. `read_certificate` reads both names up front and
answers CertificateDefect naming the field, so the Fabric receipt verifier
(ledger.audit.fabric_trust) and the embedded engine's MSP (ledger.engine.msp) report a defect where
they would have crashed.
"""

from __future__ import annotations

from cryptography import x509


class CertificateDefect(ValueError):
    """Certificate bytes that cannot be read; the message names the field."""


def read_certificate(pem: bytes) -> x509.Certificate:
    """The certificate in `pem`, its subject and issuer readable, or CertificateDefect."""
    try:
        cert = x509.load_pem_x509_certificate(pem)
    except x509.InvalidVersion as exc:
        raise CertificateDefect(f"not an X.509 v1 or v3 certificate ({exc})") from None
    except ValueError as exc:
        raise CertificateDefect(f"not a PEM certificate ({exc})") from None
    for part in ("subject", "issuer"):
        try:
            getattr(cert, part).rfc4514_string()
        except KeyError as exc:
            raise CertificateDefect(
                f"{part}: an attribute value has ASN.1 tag {exc.args[0]}, not a string type"
            ) from None
        except (ValueError, TypeError) as exc:
            raise CertificateDefect(f"{part}: {exc}") from None
    return cert
