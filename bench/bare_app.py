"""The reference for bench/webhooks.py: a bare Flask endpoint that answers 200, served by the same gunicorn settings."""

from flask import Flask, jsonify, request

app = Flask(__name__)


@app.post("/webhooks/whatsapp")
def receive():
    request.get_data()
    return jsonify(received=1)
