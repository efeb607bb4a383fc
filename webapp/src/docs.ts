// /docs: the JSON API described by /openapi.json, in Swagger UI served by the app itself (a CDN's copy left a blank
// page wherever the app runs without internet). "Try it out" sends the session's CSRF token, as the app's pages
// do, so a change tried here is not refused for the header alone.
import SwaggerUIBundle from "swagger-ui-dist/swagger-ui-bundle.js";
import "swagger-ui-dist/swagger-ui.css";

interface Request { method: string; headers: Record<string, string> }

async function sessionToken(): Promise<string | null> {
  const answer = await fetch("/api/session");
  return answer.ok ? ((await answer.json()) as { csrf: string | null }).csrf : null;
}

void sessionToken().then((csrf) => SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  requestInterceptor: (request: Request) => {
    if (csrf && request.method !== "GET") request.headers["X-CSRF-Token"] = csrf;
    return request;
  },
}));
