from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "webapp.demo"
    label = "demo"
    verbose_name = "Demo"
