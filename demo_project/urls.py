"""URLs of the demo project: the shop's start page, the admin console."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("", include("demo_project.shop.urls")),
    path("admin/", admin.site.urls),
]
