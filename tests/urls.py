from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from pikku_workflows.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/workflows/", include("pikku_workflows.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("metrics/", metrics_view),
]
