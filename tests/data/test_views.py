"""The views an index embeds each photo with (lbhash.data.views), against hand-computed values."""

import numpy as np
import pytest

from lbhash.data.images import ImageDataset
from lbhash.data.edits import grayscale
from lbhash.data.views import BLUR_VIEW, ITEM_VIEW, blurred, framed_view, item_embedding, item_views, view_of
from lbhash.errors import InputError


def test_the_blur_is_a_gaussian_of_0_8_pixels_with_the_edges_repeated():
    flat = np.full((6, 9, 3), 77, np.uint8)
    assert (blurred(flat) == 77).all()  # a constant image stays as it is, edges included
    dot = np.zeros((15, 15, 3), np.uint8)
    dot[7, 7] = 255
    out = blurred(dot)[..., 0].astype(int)
    # taps exp(-x^2 / 1.28), x = -3..3, sum 2.00525: 0.49869 at the centre, then 0.22831, 0.02191, 0.00044
    assert out[7, 7] == 63 and out[7, 8] == out[6, 7] == 29 and out[6, 6] == 13 and out[7, 9] == 3
    assert out.sum() in range(250, 261) and (out[:, :4] == 0).all()  # the light is spread, not lost
    column = np.zeros((5, 1, 3), np.uint8)
    column[0] = 200  # one pixel wide: across it the edge repeats itself, so only the rows blur
    got = blurred(column)[:, 0, 0].astype(int)
    assert got.tolist() == [round(200 * (0.49869 + 0.22831 + 0.02191 + 0.00044)), round(200 * (0.22831 + 0.02191 + 0.00044)),
                            round(200 * (0.02191 + 0.00044)), 0, 0]


def test_an_item_embedding_is_the_unit_photo_plus_its_weighted_unit_views():
    photo, blur, gray = np.array([[3.0, 4.0]]), np.array([[0.0, 2.0]]), np.array([[-5.0, 0.0]])
    # the views before the grayscale one (an index that records them adds so): (0.6, 0.8) + 0.5 x (0, 1), over 1.5
    np.testing.assert_allclose(item_embedding(photo, [blur], BLUR_VIEW), [[0.4, 1.3 / 1.5]], rtol=1e-6)
    # today's: + 0.5 x (-1, 0) (grayscale) + 0.5 x (0, -1) (framed), over 2.5
    frame = np.array([[0.0, -3.0]])
    np.testing.assert_allclose(item_embedding(photo, [blur, gray, frame]), [[0.1 / 2.5, 0.8 / 2.5]], rtol=1e-6)
    assert [see for see, _ in item_views(ITEM_VIEW)] == [blurred, grayscale, framed_view]
    with pytest.raises(ValueError, match="3 views, got 2"):
        item_embedding(photo, [blur, gray])


def test_an_item_view_this_version_does_not_make_is_refused_in_one_line():
    with pytest.raises(InputError, match="item view 'sharpen-2'.*build the index again") as e:
        item_views("sharpen-2")
    assert "\n" not in str(e.value)


def test_the_blurred_view_of_a_data_set_blurs_each_item_and_keeps_the_rest():
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (4, 8, 8, 3), dtype=np.uint8)
    labels = np.eye(2, dtype=bool)[[0, 1, 1, 0]]
    photos = ImageDataset(labels=labels, is_test=None, name="four", pixels=pixels)
    view = view_of(photos, blurred)
    assert len(view) == 4 and (view.labels == labels).all() and not view.preload()
    for i in range(4):
        np.testing.assert_array_equal(view.image(i), blurred(pixels[i]))
    np.testing.assert_array_equal(photos.image(2), pixels[2])  # the photos themselves are untouched


def test_a_grayscale_view_gives_writable_arrays_of_the_photos_luminance():
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, (3, 6, 5, 3), dtype=np.uint8)
    photos = ImageDataset(labels=np.eye(3, dtype=bool), is_test=None, name="three", pixels=pixels)
    view = view_of(photos, grayscale)
    for i in range(3):
        got = view.image(i)
        # Pillow's L: (299 R + 587 G + 114 B) / 1000, rounded, in three equal channels
        want = (pixels[i].astype(np.int64) @ np.array([299, 587, 114]) + 500) // 1000
        assert got.flags.writeable and (got == got[..., :1]).all()
        assert np.abs(got[..., 0].astype(int) - want).max() <= 1


def test_the_framed_view_shrinks_the_photo_to_four_fifths_inside_a_mid_grey_frame():
    photo = np.full((20, 30, 3), 200, np.uint8)
    got = framed_view(photo)
    assert got.shape == (20, 30, 3)
    # 16 x 24 of the photo, centred: 2 rows and 3 columns of grey on each side
    assert (got[:2] == 128).all() and (got[-2:] == 128).all() and (got[:, :3] == 128).all() and (got[:, -3:] == 128).all()
    assert (got[2:18, 3:27] == 200).all()
