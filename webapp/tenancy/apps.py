from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "webapp.tenancy"
    label = "tenancy"
    verbose_name = "Tenancy"
