"""URLs of the API and console benchmarks."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/workflows/", include("pikku_workflows.api.urls")),
]
