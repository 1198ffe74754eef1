"""The demo shop's pages."""

from django.urls import path

from . import views

app_name = "shop"
urlpatterns = [path("", views.start_page, name="start")]
