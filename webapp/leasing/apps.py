from django.apps import AppConfig


class LeasingConfig(AppConfig):
    name = "webapp.leasing"
    label = "leasing"
    verbose_name = "Leasing"

    def ready(self) -> None:
        from webapp.leasing import reactions  # models are loaded only now

        reactions.register()
