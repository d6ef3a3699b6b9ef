from django.apps import AppConfig


class AttestationConfig(AppConfig):
    name = "webapp.attestation"
    label = "attestation"
    verbose_name = "Attestation"

    def ready(self) -> None:
        from webapp.attestation import reactions  # models are loaded only now

        reactions.register()
