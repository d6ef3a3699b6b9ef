from django.apps import AppConfig


class LeasingConfig(AppConfig):
    name = "webapp.leasing"
    label = "leasing"
    verbose_name = "Leasing"
