"""ldptel collector: Flask app factory, ingest, export API, operator pages."""
