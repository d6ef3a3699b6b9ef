from django.urls import path

from webapp.attestation.api import views

urlpatterns = [
    path("enrol/", views.EnrolView.as_view(), name="agent-enrol"),
    path("enrol/activate/", views.ActivateView.as_view(), name="agent-activate"),
    path("challenge/", views.ChallengeView.as_view(), name="agent-challenge"),
    path("quote/", views.QuoteView.as_view(), name="agent-quote"),
    path("report/", views.ReportView.as_view(), name="agent-report"),
]
