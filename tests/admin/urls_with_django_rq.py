"""tests.urls plus django-rq's own URLs under their namespace (``django_rq:home``)."""

from django.urls import include, path

from tests.urls import urlpatterns as base

urlpatterns = [*base, path("django-rq/", include("django_rq.urls"))]
