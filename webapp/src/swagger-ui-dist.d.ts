// The one call /docs makes of Swagger UI's browser bundle (it ships no types).
declare module "swagger-ui-dist/swagger-ui-bundle.js" {
  interface Options<R> { url: string; dom_id: string; requestInterceptor: (request: R) => R }
  export default function SwaggerUIBundle<R>(options: Options<R>): unknown;
}
