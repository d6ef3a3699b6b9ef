from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "webapp.cluster"
    label = "cluster"
    verbose_name = "Cluster"
