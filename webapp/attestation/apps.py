from django.apps import AppConfig


class AttestationConfig(AppConfig):
    name = "webapp.attestation"
    label = "attestation"
    verbose_name = "Attestation"
